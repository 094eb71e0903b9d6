"""The results store: one JSON record per result (a finished run, a benchmark row set, a numerics study).

Records live in `leaderboard/results/` of the checkout (committed when curated), or where $LRA_RESULTS points.
Each record carries what is needed to trace a figure: task, backend, metrics, the resolved config and its hash, the
git commit, device, library versions and date.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import torch

from lra.atomic import write_json

REPO_ROOT = Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    """$LRA_RESULTS, else the checkout's leaderboard/results, else ~/.local/share/lra/results."""
    env = os.environ.get("LRA_RESULTS")
    if env:
        return Path(env).expanduser()
    if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "leaderboard").is_dir():
        return REPO_ROOT / "leaderboard" / "results"
    return Path.home() / ".local" / "share" / "lra" / "results"


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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def save_record(record: dict[str, Any], store: str | os.PathLike[str] | None = None) -> Path:
    """Write `record` atomically as a new JSON file in the store; returns its path."""
    store = Path(store) if store is not None else results_dir()
    stamp = record.get("date", "").replace(":", "").replace("-", "")
    parts = [record.get("kind", "record"), record.get("task"), record.get("backend"), record.get("preset"), stamp]
    base = _slug("__".join(str(p) for p in parts if p))
    path = store / f"{base}.json"
    i = 1
    while path.exists():
        path = store / f"{base}_{i}.json"
        i += 1
    write_json(path, record)
    return path


def load_records(store: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every record in the store, each with its file name under '_file', sorted by file name."""
    store = Path(store) if store is not None else results_dir()
    out = []
    for path in sorted(store.glob("*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"results store: {path} is not a readable JSON record ({e}); fix or remove it") from None
        rec["_file"] = path.name
        out.append(rec)
    return out
