"""`lra campaign`: a curriculum of runs (Pathfinder-32 -> Path-64 -> Path-X or Path-256) carried across sessions.

plan: the stages, read from the presets' train.init_from chain; ledger: the state folder's campaign.json (stages,
sessions, device seconds); drive: one session, from wherever the state folder says the campaign stands.
"""
