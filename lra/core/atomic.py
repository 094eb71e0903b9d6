"""Atomic file writes: write to a temporary name in the same folder, fsync, then rename over the target.

A killed process leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed to `path`, on error it is removed.

    `suffix` keeps a file extension some writers insist on (numpy's `.npy`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode a plain open() would
    try:
        yield tmp_path
        if tmp_path.is_file():
            with open(tmp_path, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            if tmp_path.is_dir():
                import shutil

                shutil.rmtree(tmp_path)
            else:
                tmp_path.unlink()
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """open() for writing that only replaces `path` when the block finishes without error."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as f:
        yield f


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write `obj` as indented, key-sorted JSON atomically (stable bytes for the same object)."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
