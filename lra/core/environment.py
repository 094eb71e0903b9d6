"""Where a result was measured: device, library versions, git commit and date, for every record."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


def triton_interpreting() -> bool:
    """Whether Triton kernels run in its CPU interpreter (TRITON_INTERPRET set, and not to 0): the one reading of
    that variable, for the backends' capability checks and the kernels' launch checks alike."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def git_commit() -> str | None:
    """HEAD of the checkout this code runs from, with '+dirty' when the work tree has changes; None outside git.

    `LRA_GIT_COMMIT` overrides it, for copies of a work tree whose .git does not follow the files (a remote machine).
    """
    if os.environ.get("LRA_GIT_COMMIT"):
        return os.environ["LRA_GIT_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def device_name(device: str | torch.device) -> str:
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(dev)
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def environment(device: str | torch.device) -> dict[str, Any]:
    """Device, versions, commit and date for a record."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "triton": triton_version,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
