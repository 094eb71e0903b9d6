"""The one on-disk cache of every task: a folder of .npy files plus `meta.json`, written whole or not at all.

Layout: `<data_dir>/<folder>/<name>/`, where `folder` is the task's folder (`listops`, `text`, `pathfinder/32px-...`)
and `name` is, unless the task names it, the `lra.core.hashing.stable_hash` of the settings that decide the contents.
`meta.json` holds those settings, the examples per split (`counts`), the files with their sizes (`files`), the source
the cache was built from (`source`, see `source_fingerprint`) and what the task adds. A cache is written into a
temporary sibling folder and renamed into place only when every file is complete and synced, so a failed or killed
build leaves the previous cache (or none) exactly as it was. Splits load memory-mapped.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lra.core.errors import DataMissingError, RunSetupError
from lra.core.hashing import stable_hash
from tasks.base import SPLITS, Split

META = "meta.json"
CACHE_FORMAT = 2  # part of every cache key: bump when the layout changes, so old folders are never misread
# Errors only a write raises, so they are the cache's (not the source's being read meanwhile).
WRITE_ERRORS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the disk is read-only",
}


def source_fingerprint(source: str) -> dict[str, Any]:
    """What identifies a data source; a cache records it, and a run compares it with the source it is given.

    'tfds' stands for itself. A file: its resolved path, size and modification time (ns). A folder: its resolved path,
    the number and total size of the files below it and a hash of every (relative path, size, mtime). Reading no file
    contents keeps this cheap (a stat per file); any change of a file's size or time counts as a different source.
    A source that does not exist or cannot be read is a DataMissingError.
    """
    if source == "tfds":
        return {"path": "tfds"}
    path = Path(source).expanduser()
    try:
        st = path.stat()
        if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            raise PermissionError(13, "permission denied")
        if not path.is_dir():
            return {"path": str(path.resolve()), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
        entries = []
        for root, dirs, files in os.walk(path, onerror=_raise, followlinks=True):
            dirs.sort()
            for name in sorted(files):
                fst = os.stat(os.path.join(root, name))
                entries.append((os.path.relpath(os.path.join(root, name), path), fst.st_size, fst.st_mtime_ns))
    except OSError as e:
        raise DataMissingError(f"data source {source} cannot be read: {e.strerror or e}") from None
    total = sum(e[1] for e in entries)
    return {"path": str(path.resolve()), "files": len(entries), "bytes": total, "digest": stable_hash(entries)}


def _raise(err: OSError) -> None:
    raise err


def describe_source(fingerprint: Mapping[str, Any]) -> str:
    """'/x/a.tar.gz (28,378,515 bytes, modified 2026-12-01 08:19:03 UTC)' and the like, for messages."""
    if "mtime_ns" in fingerprint:
        when = _dt.datetime.fromtimestamp(fingerprint["mtime_ns"] / 1e9, _dt.timezone.utc)
        return f"{fingerprint['path']} ({fingerprint['bytes']:,} bytes, modified {when:%Y-%m-%d %H:%M:%S} UTC)"
    if "files" in fingerprint:
        return f"{fingerprint['path']} ({fingerprint['files']:,} files, {fingerprint['bytes']:,} bytes)"
    return str(fingerprint.get("path"))


class CacheWriter:
    """Collects a cache's files in a temporary folder; `TaskCache.writer()` publishes them or throws them away."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.meta: dict[str, Any] = {"counts": {}}

    def array(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.memmap:
        """A zero-filled `<name>.npy` opened for writing in place (for arrays too large to build in memory)."""
        return np.lib.format.open_memmap(self.folder / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.folder / f"{name}.npy", np.ascontiguousarray(array))

    def split(self, split: str, data: Split) -> None:
        """Store one split's tokens and labels and count its examples."""
        self.save(f"{split}_tokens", data.tokens)
        self.save(f"{split}_labels", data.labels)
        self.meta["counts"][split] = len(data)


class TaskCache:
    """The cache folder of one task under one set of settings (`name` overrides the hashed folder name)."""

    def __init__(
        self, data_dir: str | os.PathLike[str], folder: str, settings: Mapping[str, Any], name: str | None = None
    ) -> None:
        self.settings = {**settings, "cache_format": CACHE_FORMAT}
        self.task_dir = Path(data_dir) / folder
        self.path = self.task_dir / (name or stable_hash(self.settings))

    def exists(self) -> bool:
        """True when the metadata and every file it lists are in place."""
        try:
            files = self.meta()["files"]
        except (OSError, ValueError, KeyError):
            return False
        return all((self.path / f).is_file() for f in files)

    def meta(self) -> dict[str, Any]:
        with open(self.path / META, encoding="utf-8") as f:
            return json.load(f)

    def array(self, name: str, mmap: bool = True) -> np.ndarray:
        """`<name>.npy`, memory-mapped (read-only) by default."""
        return np.load(self.path / f"{name}.npy", mmap_mode="r" if mmap else None)

    def load(self, split: str, mmap: bool = True) -> Split:
        """One split stored by `CacheWriter.split`."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
        tokens = f"{split}_tokens"
        return Split(
            self.array(tokens, mmap), self.array(f"{split}_labels", mmap), source=str(self.path / f"{tokens}.npy")
        )

    def size(self) -> int:
        """Bytes on disk (0 when absent)."""
        if not self.path.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    def stale_reason(self, fingerprint: Mapping[str, Any]) -> str | None:
        """None when this (complete) cache was built from the source `fingerprint` describes, else how they differ."""
        built = self.meta().get("source")
        if built == dict(fingerprint):
            return None
        if not isinstance(built, dict):
            return f"the cache at {self.path} does not record the source it was built from"
        if built.get("path") != fingerprint.get("path"):
            return f"the cache at {self.path} was built from {describe_source(built)}"
        return (
            f"it changed since the cache at {self.path} was built from it "
            f"(then: {describe_source(built)}; now: {describe_source(fingerprint)})"
        )

    @contextlib.contextmanager
    def writer(self, keep_existing: bool = False) -> Iterator[CacheWriter]:
        """Write a complete cache: files go to a temporary folder that replaces `self.path` only on success.

        On an exception (or Ctrl-C) the temporary folder is removed and an existing cache is left untouched. With
        `keep_existing` (generated data: the same settings give the same files) a cache that another process
        completed meanwhile is kept and this one dropped.
        """
        try:
            self.task_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.task_dir))
        except OSError as e:
            raise self._cannot_write(e) from e
        try:
            w = CacheWriter(tmp)
            yield w
            files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
            meta = {"settings": self.settings, **w.meta, "files": files}
            with open(tmp / META, "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2, sort_keys=True, default=str)
                f.write("\n")
            for p in tmp.iterdir():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
            if not (keep_existing and self.exists()):
                self._publish(tmp, keep_existing)
        except OSError as e:
            if e.errno not in WRITE_ERRORS:
                raise
            raise self._cannot_write(e) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already when published

    def _cannot_write(self, err: OSError) -> RunSetupError:
        """A one-line error for a cache that cannot be written: which folder, why, and that nothing was damaged."""
        why = WRITE_ERRORS.get(err.errno) or err.strerror or str(err)
        kept = "the cache that was there is intact" if self.exists() else "nothing half-written was left"
        fix = "free some space, or keep" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "keep"
        return RunSetupError(
            f"cannot write the data cache {self.path}: {why}; {kept}: {fix} the data elsewhere with "
            "--data-dir or LRA_DATA"
        )

    def _publish(self, tmp: Path, keep_existing: bool) -> None:
        # A folder cannot be renamed over a non-empty one: move the old cache aside first, then drop it.
        old = None
        if self.path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".old", dir=self.task_dir))
            os.rmdir(old)
            os.replace(self.path, old)
        try:
            os.replace(tmp, self.path)
        except BaseException as e:
            if old is not None:
                os.replace(old, self.path)
            if not (keep_existing and isinstance(e, OSError) and self.exists()):
                raise
            return  # another process published the same data first: keep theirs
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
