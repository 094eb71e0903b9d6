"""Ownership locks: an exclusive flock on a file that names its holder (pid, host, since when).

The kernel drops an flock when the last descriptor of it closes, so a lock dies with its holder however the holder
dies (kill -9 included) and never needs cleaning up. A holder may hand its descriptor to a child process, which then
keeps the lock as long as it lives (the sweep does this with each `lra run` it starts).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def try_lock(path: str | os.PathLike[str], what: str) -> int | None:
    """A descriptor holding an exclusive flock on `path` (created if needed), with this process written into it as
    its holder (`what`: the command, e.g. 'lra run'); None when another process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    _name_holder(fd, what)
    return fd


def _name_holder(fd: int, what: str) -> None:
    """Write this process into the lock file `fd` holds, as its holder."""
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": since, "what": what}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)


def holder(path: str | os.PathLike[str]) -> str:
    """Who holds the lock on `path`, in words: 'lra run (pid 123 on host, since 2026-12-03 08:10:00)'."""
    try:
        with open(path, encoding="utf-8") as f:
            h = json.load(f)
        return f"{h['what']} (pid {h['pid']} on {h['host']}, since {h['since']})"
    except (OSError, ValueError, KeyError, TypeError):  # being written this instant, or from an older version
        return "another process"


def is_locked(path: str | os.PathLike[str]) -> bool:
    """Whether another process holds the lock on `path` now (a missing file is unlocked)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def waiting(path: str | os.PathLike[str], what: str, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` for the block; while another process holds it, wait (`on_wait` is told
    once who holds it, in `holder`'s words). For work that two processes would otherwise both do, such as drawing
    the same data: the second waits for the first and then finds it done."""
    fd = try_lock(path, what)
    if fd is None:
        if on_wait is not None:
            on_wait(holder(path))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks; a signal that ends this process ends the wait
        _name_holder(fd, what)
    try:
        yield
    finally:
        os.close(fd)
