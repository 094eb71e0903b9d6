"""Process groups in tests that kill commands: which members still live, and waiting until none does (Linux /proc).

A SIGKILL'd group's leader can be reaped while its children are still exiting and holding their file locks; a test
that goes on at once would meet those locks."""

from __future__ import annotations

import time
from pathlib import Path


def living_in_group(pgid: int) -> list[int]:
    """Processes of group `pgid` that are neither zombies nor dead."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(stat.parent.name))
    return found


def wait_until_gone(pgid: int, timeout: float = 60.0) -> None:
    """Wait until no process of group `pgid` lives; an AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while living_in_group(pgid):
        assert time.monotonic() < deadline, f"processes of group {pgid} still live: {living_in_group(pgid)}"
        time.sleep(0.05)
