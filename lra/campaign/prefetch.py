"""A stage's data drawn in a process of its own: the next stage's while this stage trains (the GPU trains, the idle
cores draw), and the current stage's under the campaign's time limit (stopped when it would outlast it).

Every new machine draws a stage's data afresh (Path-64's and Path-X's 200,000 images take minutes on 16 cores),
and a training stage leaves most cores idle. `Prefetch` runs `lra data prepare` for the next stage in its own
process group, beside the training, so that the next stage can start as soon as this one ends. A cache appears
under its name only once complete (tasks/_cache.py), so a draw stopped halfway leaves nothing that looks ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lra.core.signals import STOP

LOG = "prefetch-{task}.log"  # the next stage's draw, beside the training
DRAW_LOG = "draw-{task}.log"  # the current stage's own draw
POLL_S = 1.0  # how often a wait looks for a stop request


def prepare_command(task: str, data: dict[str, Any], *, workers: int, data_dir: str | None) -> list[str]:
    """`lra data prepare` for `task` with exactly these data settings (each one a `--set`)."""
    cmd = [sys.executable, "-m", "lra", "data", "prepare", task, "--workers", str(workers)]
    for key, value in sorted(data.items()):
        cmd += ["--set", f"data.{key}={json.dumps(value)}"]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    return cmd


class Prefetch:
    """One `lra data prepare` in the background, its output in `log`."""

    def __init__(self, task: str, cmd: list[str], log: Path) -> None:
        self.task, self.cmd, self.log = task, cmd, log
        self.started = time.monotonic()
        with open(log, "w", encoding="utf-8") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)  # fmt: skip

    def wait(self, timeout: float) -> str:
        """Wait up to `timeout` seconds, or until a signal asks this process to stop (lra.core.signals.STOP), then
        say how it stands (`outcome`)."""
        end = time.monotonic() + max(0.0, timeout)
        while not STOP.requested:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=max(0.0, min(POLL_S, end - time.monotonic())))
            if self.proc.poll() is not None or time.monotonic() >= end:
                break
        return self.outcome()

    def stop(self) -> None:
        """End the draw and its worker processes (nothing half-drawn is kept), if it still runs."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def outcome(self) -> str:
        """'done', 'failed' (an error), 'stopped' (ended by `stop`) or 'running'."""
        rc = self.proc.poll()
        return "running" if rc is None else "done" if rc == 0 else "stopped" if rc < 0 else "failed"

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)
