"""The results store: one JSON record per result (a finished run, a benchmark row set, a numerics study).

`lra run`, `bench` and `numerics` write to the user's store ($LRA_RESULTS, default ~/.local/share/lra/results), never
into the checkout; the curated records behind published figures ship in `leaderboard/results/` and are added there
only on purpose (`--results leaderboard/results`).
Each record carries what is needed to trace a figure: task, backend, metrics, the resolved config and its hash, the
git commit, device, library versions and date.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from lra.core.atomic import write_json
from lra.core.environment import REPO_ROOT


def results_dir() -> Path:
    """The user's results store: $LRA_RESULTS, else ~/.local/share/lra/results (never inside the checkout)."""
    env = os.environ.get("LRA_RESULTS")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "lra" / "results"


def curated_dir() -> Path:
    """The curated records that ship with the repository (`leaderboard/results/`)."""
    return REPO_ROOT / "leaderboard" / "results"


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
