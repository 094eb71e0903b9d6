"""Pathfinder generator, caches and release reader behind tasks/pathfinder.py (private: not a registered task)."""
