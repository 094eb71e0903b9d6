"""lra: the Long Range Arena benchmark suite (harness: config, model, training, results, leaderboard)."""

__version__ = "0.1.0"
