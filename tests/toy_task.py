"""A tiny learnable task for harness tests (registered only when tests import it): label = first token mod 4.

Sequences are right-padded with random lengths, so padding masks are exercised.
"""

from __future__ import annotations

import numpy as np

from tasks.base import Split, Task
from tasks.registry import TASKS, register_task

TOY_YAML = """
task: toy
data: {max_length: 24, num_train: 512}
model: {layers: 1, dim: 32, heads: 2, mlp_dim: 64, dropout: 0.1, attention_dropout: 0.0}
train: {batch_size: 32, steps: 120, lr: 0.01, schedule: cosine, warmup: 10, eval_every: 40, log_every: 5}
presets:
  tiny: {train: {steps: 40}}
"""


class ToyTask(Task):
    """label = first token mod 4 (tokens 1..15), random right padding."""

    num_classes = 4
    generated = True

    def __init__(self, data_dir=None, max_length: int = 24, num_train: int = 512, seed: int = 0):
        super().__init__(data_dir, max_length)
        self.num_train, self.seed = num_train, seed

    @property
    def vocab_size(self) -> int:
        return 16

    def load(self, split: str) -> Split:
        n = {"train": self.num_train, "val": 128, "test": 128}[split]
        rng = np.random.default_rng([self.seed, ["train", "val", "test"].index(split)])
        tokens = rng.integers(1, 16, size=(n, self.max_length)).astype(np.int16)
        lengths = rng.integers(2, self.max_length + 1, size=n)
        tokens[np.arange(self.max_length)[None, :] >= lengths[:, None]] = 0
        return Split(tokens, tokens[:, 0] % 4)

    def prepare(self, source=None, workers=1) -> None:
        pass


if "toy" not in TASKS._entries:
    register_task("toy")(ToyTask)


def toy_config_path(tmp_path) -> str:
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_YAML)
    return str(path)
