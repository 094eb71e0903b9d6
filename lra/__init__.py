"""lra: the Long Range Arena benchmark suite. The harness in layers: core, model, train, results, bench, numerics,
sweep, cli (docs/architecture.md)."""

__version__ = "0.1.0"
