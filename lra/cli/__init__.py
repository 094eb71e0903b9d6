"""The `lra` command line; `main` is the console script."""

from lra.cli.main import main

__all__ = ["main"]
