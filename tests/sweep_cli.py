"""`python -m tests.sweep_cli ARGS`: the `lra` command with two toy tasks registered, for the sweep tests.

A sweep starts each run as `python -m RUNNER run ...`; the tests pass `--runner tests.sweep_cli`, so that the run
processes (and submitit's job processes) know the toy tasks too. `toy` is tests/toy_task.py's (label = first token
mod 4); `toy_last` labels a sequence by its last real token mod 3, a second task with other data and classes.
"""

from __future__ import annotations

import sys

import numpy as np

from tasks.base import Split
from tasks.registry import TASKS, register_task
from tests.toy_task import ToyTask

TOY_YAML = """
task: {task}
data: {{max_length: 16, num_train: 256}}
model: {{layers: 1, dim: 16, heads: 2, mlp_dim: 32, dropout: 0.1, attention_dropout: 0.0}}
train: {{batch_size: 16, steps: 60, lr: 0.01, schedule: cosine, warmup: 6, eval_every: 10, log_every: 5}}
presets:
  short: {{train: {{steps: 20}}}}
"""


class ToyLastTask(ToyTask):
    """label = last real token mod 3 (same random right-padded sequences as `toy`)."""

    num_classes = 3

    def load(self, split: str) -> Split:
        tokens = ToyTask.load(self, split).tokens
        last = np.maximum((tokens != 0).sum(1) - 1, 0)
        return Split(tokens, tokens[np.arange(len(tokens)), last] % 3)


if "toy_last" not in TASKS._entries:
    register_task("toy_last")(ToyLastTask)


def write_configs(folder) -> list[str]:
    """The two toy tasks' YAML files in `folder`; returns their paths."""
    paths = []
    for task in ("toy", "toy_last"):
        path = folder / f"{task}.yaml"
        path.write_text(TOY_YAML.format(task=task))
        paths.append(str(path))
    return paths


if __name__ == "__main__":
    from lra.cli.main import main

    raise SystemExit(main(sys.argv[1:]))
