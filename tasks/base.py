"""The task interface: a task turns its data source into integer token arrays and labels, cached on disk.

A task is a class registered in `tasks.registry.TASKS`. It is built with the data directory and the config's `data:`
settings; `load(split)` returns a `Split` (tokens shaped (N, L), or (N, 2, L) for two-document tasks; 0 is padding
everywhere) and `prepare()` builds or imports the cache. Generated tasks build their data on first use; real-data
tasks raise `DataMissingError` naming the file they expect, where it comes from and the `lra data prepare` line.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

SPLITS = ("train", "val", "test")
# What every task's `info()` holds (`lra data info` shows them as a table): the task name; `source`, where the data
# comes from (a path, 'tfds', a URL to download, or the generator); `where`, the cache folder; `splits`, examples per
# split a run with these settings uses; `bytes` on disk; `ready`, whether a run can start without preparing; `prepare`,
# the exact `lra data prepare ...` line when not ready (else None); `details`, what is particular to the task.
INFO_FIELDS = ("task", "source", "where", "splits", "bytes", "ready", "prepare", "details")


@dataclass
class Split:
    """One split in memory (or memory-mapped): integer tokens (N, L) or (N, 2, L), integer labels (N,); `source`:
    the file the tokens were read from (named when they turn out to be corrupt), None when built in memory."""

    tokens: np.ndarray
    labels: np.ndarray
    source: str | None = None

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.labels):
            raise ValueError(f"{len(self.tokens)} token rows but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.labels)


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
    pose_invariant: ClassVar[bool] = False  # the label holds under flips and quarter turns (train.augment)
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
        """What `lra data info` shows, the same fields for every task (see `INFO_FIELDS`). This default suits a task
        that keeps nothing on disk; the project's tasks report their caches."""
        return self.info_fields(
            source=self.description or self.name, where=self.data_dir, splits={}, size=0, ready=True, details={}
        )

    def cache_options(self) -> dict[str, Any]:
        """The data settings (config keys) that decide what is cached, with this task's values."""
        return {}

    @classmethod
    def pads_inside(cls, data: dict[str, Any]) -> bool:
        """Whether, with the data settings `data`, padding (token 0) can sit between real tokens rather than only
        after them: backends that take only right-padded masks cannot train such data."""
        return False

    def prepare_command(self, source: str | None = None) -> str:
        """The exact `lra data prepare` line that builds this task's cache: `--from source`, a `--set` for every
        cache-deciding setting that differs from its default (the configs' defaults are the constructors'), and
        `--data-dir` when it is not the default."""
        from tasks.registry import TASKS  # here: the registry imports this module

        defaults = TASKS.options(self.name)
        parts = ["lra", "data", "prepare", self.name]
        if source is not None:
            parts += ["--from", str(source)]
        for key, value in self.cache_options().items():
            if value != defaults.get(key):
                shown = value if isinstance(value, str) else json.dumps(value)  # YAML reads JSON scalars back
                parts += ["--set", f"data.{key}={shown}"]
        if self.data_dir != default_data_dir():
            parts += ["--data-dir", str(self.data_dir)]
        return shlex.join(parts)

    def info_fields(
        self,
        *,
        source: str,
        where: Path | str,
        splits: dict[str, int],
        size: int,
        ready: bool,
        details: dict[str, Any],
        prepare_from: str | None = None,
    ) -> dict[str, Any]:
        """The `info()` dict: `prepare` is the prepare line (with `--from prepare_from`) when not ready, else None."""
        return {
            "task": self.name,
            "source": source,
            "where": str(where),
            "splits": {s: int(n) for s, n in splits.items()},
            "bytes": int(size),
            "ready": bool(ready),
            "prepare": None if ready else self.prepare_command(prepare_from),
            "details": details,
        }
