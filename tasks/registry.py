"""The task interface: a task turns its data source into integer token arrays and labels, cached on disk.

A task is a registered class. It is built with the data directory and the config's `data:` settings; `load(split)`
returns a `Split` (tokens shaped (N, L), or (N, 2, L) for two-document tasks; 0 is padding everywhere) and
`prepare()` builds or imports the cache. Generated tasks build their data on first use; real-data tasks raise
`DataMissingError` naming the file they expect, where it comes from and the `lra data prepare` line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lra.core.registry import Registry

TASKS: Registry[type[Task]] = Registry("task", package="tasks", fixed=("data_dir",), option_noun="data setting")
register_task = TASKS.register

SPLITS = ("train", "val", "test")


@dataclass
class Split:
    """One split in memory (or memory-mapped): integer tokens (N, L) or (N, 2, L), integer labels (N,)."""

    tokens: np.ndarray
    labels: np.ndarray

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.labels):
            raise ValueError(f"{len(self.tokens)} token rows but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, n: int | None) -> Split:
        """The first n examples (all when n is None or larger)."""
        if n is None or n >= len(self):
            return self
        return Split(self.tokens[:n], self.labels[:n])


def default_data_dir() -> Path:
    """Where task data is cached: $LRA_DATA, else ~/.cache/lra/data."""
    env = os.environ.get("LRA_DATA")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lra" / "data"


class Task:
    """Base class of every task. Subclasses set the class attributes and implement `load` and `prepare`."""

    name: ClassVar[str]
    num_classes: ClassVar[int]
    pair: ClassVar[bool] = False  # two documents per example (retrieval): the model uses the dual-tower head
    generated: ClassVar[bool] = False  # data is synthetic: `load` builds it when missing
    description: ClassVar[str] = ""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, max_length: int = 1024) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.max_length = int(max_length)

    @property
    def vocab_size(self) -> int:
        """Number of token ids, padding (0) included."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        return self.max_length

    def load(self, split: str) -> Split:
        """The split 'train', 'val' or 'test' from the cache (building generated data when missing)."""
        raise NotImplementedError

    def prepare(self, source: str | os.PathLike[str] | None = None, workers: int = 1) -> None:
        """Build (generated tasks) or import (real data, from `source`) the cache, with progress."""
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """What is cached for this task, where, and how big."""
        return {"task": self.name, "data_dir": str(self.data_dir)}


def task_options(name: str) -> dict[str, Any]:
    """The `data:` settings task `name` takes, with defaults."""
    return TASKS.options(name)


def build_task(name: str, data_dir: str | os.PathLike[str] | None = None, **options: Any) -> Task:
    """Build task `name` with the config's data settings; unknown settings fail with the valid ones."""
    return TASKS.build(name, options, data_dir=data_dir)
