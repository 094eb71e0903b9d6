"""A task's on-disk cache: one folder per (task, settings), splits stored as .npy files that load memory-mapped.

Layout: `<data_dir>/<task>/<settings hash>/` holds `meta.json` (settings, counts, provenance) and, per split,
`<split>_tokens.npy` and `<split>_labels.npy`. A cache is written whole into a temporary sibling folder and renamed into
place only when every file is complete, so a failed or killed import leaves the previous cache (or none) as it was.
Any task can use it: real-data readers and generators alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tasks.registry import SPLITS, Split

META = "meta.json"


def settings_hash(settings: Mapping[str, Any]) -> str:
    """A short stable hash of the settings that decide a cache's contents (key order does not matter)."""
    blob = json.dumps(dict(settings), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


class CacheWriter:
    """Collects a cache's files in a temporary folder; `TaskCache.writer()` publishes them or throws them away."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.meta: dict[str, Any] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """A zero-filled .npy file opened for writing in place (for splits too large to build in memory)."""
        return np.lib.format.open_memmap(self.folder / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.folder / f"{name}.npy", np.ascontiguousarray(array))

    def split(self, split: str, data: Split) -> None:
        """Store one split's tokens and labels."""
        self.save(f"{split}_tokens", data.tokens)
        self.save(f"{split}_labels", data.labels)


class TaskCache:
    """The cache folder of one task under one set of settings."""

    def __init__(self, data_dir: str | os.PathLike[str], task: str, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        self.task_dir = Path(data_dir) / task
        self.path = self.task_dir / settings_hash(self.settings)

    def exists(self, splits: tuple[str, ...] = SPLITS) -> bool:
        """True when the metadata and every split's files are in place."""
        if not (self.path / META).is_file():
            return False
        return all((self.path / f"{s}_{part}.npy").is_file() for s in splits for part in ("tokens", "labels"))

    def meta(self) -> dict[str, Any]:
        with open(self.path / META, encoding="utf-8") as f:
            return json.load(f)

    def load(self, split: str, mmap: bool = True) -> Split:
        """One split, memory-mapped by default (the arrays are read-only then)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        mode = "r" if mmap else None
        tokens = np.load(self.path / f"{split}_tokens.npy", mmap_mode=mode)
        labels = np.load(self.path / f"{split}_labels.npy", mmap_mode=mode)
        return Split(tokens, labels)

    @contextlib.contextmanager
    def writer(self) -> Iterator[CacheWriter]:
        """Write a complete cache: files go to a temporary folder that replaces `self.path` only on success.

        On an exception (or Ctrl-C) the temporary folder is removed and an existing cache is left untouched.
        """
        self.task_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.task_dir))
        try:
            w = CacheWriter(tmp)
            yield w
            meta = {"settings": self.settings, **w.meta}
            with open(tmp / META, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2, sort_keys=True, default=str)
                f.write("\n")
            for p in tmp.iterdir():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
            self._publish(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _publish(self, tmp: Path) -> None:
        # A folder cannot be renamed over a non-empty one: move the old cache aside first, then drop it.
        old = None
        if self.path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".old", dir=self.task_dir))
            os.rmdir(old)
            os.replace(self.path, old)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            if old is not None:
                os.replace(old, self.path)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        """Where the cache is, whether it is complete, its split sizes and its size on disk."""
        out: dict[str, Any] = {"path": str(self.path), "settings": self.settings, "prepared": self.exists()}
        if self.path.is_dir():
            files = {p.name: p.stat().st_size for p in sorted(self.path.iterdir()) if p.is_file()}
            total = sum(files.values())
            out.update(files=files, bytes=total, size=human_bytes(total))
        if out["prepared"]:
            meta = self.meta()
            out["splits"] = {s: int(np.load(self.path / f"{s}_labels.npy", mmap_mode="r").shape[0]) for s in SPLITS}
            out.update({k: v for k, v in meta.items() if k != "settings"})
        others = []
        if self.task_dir.is_dir():
            for p in sorted(self.task_dir.iterdir()):
                if p.is_dir() and p != self.path and not p.name.startswith(".") and (p / META).is_file():
                    others.append(str(p))
        if others:
            out["other_caches"] = others  # built for other settings
        return out
