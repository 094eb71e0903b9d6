"""Results: the record store, the published reference rows, leaderboard rendering and plots."""
