"""`python -m tests.sweep_cli_asked ARGS`: tests/sweep_cli.py's command, whose run sends itself SIGTERM after its
first evaluation, as a scheduler's notice would reach it: the sweep test of a run asked to stop."""

from __future__ import annotations

import os
import signal
import sys

import tests.sweep_cli  # noqa: F401  (registers the toy tasks)
from lra.train import run as train_run

evaluate = train_run._Run.evaluate


def evaluate_then_ask(self, *args, **kwargs):
    evaluate(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)


train_run._Run.evaluate = evaluate_then_ask

if __name__ == "__main__":
    from lra.cli.main import main

    raise SystemExit(main(sys.argv[1:]))
