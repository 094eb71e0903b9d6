"""Seed aggregation: the records of one config (the same resolved config apart from `train.seed`) make one cell.

A cell shows the mean, the sample standard deviation (n - 1 denominator) and the number of seeds n; a cell with
n < MIN_SEEDS is marked, because two seeds say little about the spread (ListOps seeds differ by 17 points).

n counts distinct seeds, never records (`one_per_seed`): of several records of one (config, seed), the newest counts
(a seed run again replaces its earlier run: CUDA training is not bitwise repeatable, so a re-run's figures may
differ). Two records of one run directory are one run: stored twice (a record written again) they agree and count
once; with other test or validation accuracies they disagree, and that is an error naming both files, since one of
them cannot be that run's result.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lra.core.errors import DataCorruptError
from lra.core.hashing import flat_settings, stable_hash
from lra.results.published import LRA_TASKS
from lra.results.table import FEW_MARK, Ref
from lra.train.config import SPEED_SETTINGS, comparable

MIN_SEEDS = 3
SEEDS_NOTE = (
    f"A measured cell is the mean ± sample standard deviation over the seeds of one config, n the number of seeds;"
    f" {FEW_MARK} marks fewer than {MIN_SEEDS} seeds."
)


def seed_free_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without `train.seed` and the speed-only settings (compile mode, evaluation batch, data placement):
    what makes two runs seeds of one config. Settings added since a record was stored take the value it ran with."""
    config = comparable(config)
    train = {k: v for k, v in (config.get("train") or {}).items() if k != "seed" and k not in SPEED_SETTINGS}
    return {**config, "train": train}


def config_key(record: dict[str, Any]) -> str | None:
    """The seed-free config hash of a record; the stored `config_hash` for records that carry no config."""
    config = record.get("config")
    if isinstance(config, dict):
        return stable_hash(seed_free_config(config))
    return record.get("config_hash")


def seed_of(record: dict[str, Any]) -> Any:
    """The record's `train.seed`, None when it has no config."""
    config = record.get("config")
    return ((config.get("train") or {}) if isinstance(config, dict) else {}).get("seed")


def refs_of(records: Iterable[dict[str, Any]]) -> tuple[Ref, ...]:
    """The record files behind a cell, labelled by seed (`s0`) or `rec` when the record has none."""
    out = []
    for rec in records:
        seed = seed_of(rec)
        out.append(Ref("rec" if seed is None else f"s{seed}", Path(rec["_path"])))
    return tuple(out)


@dataclass(frozen=True)
class Agg:
    """Values of one config over its seeds (or repeated benchmark records)."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if self.n > 1 else None

    @property
    def few(self) -> bool:
        return self.n < MIN_SEEDS


def aggregate(values: Iterable[float | None]) -> Agg | None:
    """The finite values as an `Agg`; None when there are none."""
    kept = tuple(float(v) for v in values if v is not None)
    return Agg(kept) if kept else None


def fmt_agg(agg: Agg | None, *, scale: float = 1.0, digits: int = 1, unit: str = "", mark_few: bool = True) -> str:
    """'36.5 ± 1.2 (n=3)'; with fewer than MIN_SEEDS values the text ends with FEW_MARK; '-' for no values."""
    if agg is None:
        return "-"
    text = f"{fmt_mean_std(agg, scale=scale, digits=digits)}{unit} (n={agg.n})"
    return f"{text} {FEW_MARK}" if mark_few and agg.few else text


def fmt_mean_std(agg: Agg, *, scale: float = 1.0, digits: int = 1) -> str:
    """'36.5 ± 1.2', or '36.5' for a single value: the figure of a cell without its seed count."""
    text = f"{scale * agg.mean:,.{digits}f}"
    return text if agg.std is None else f"{text} ± {scale * agg.std:,.{digits}f}"


def group_by(records: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict]]:
    """Records grouped by `key`, each group in a fixed order (seed, then file path)."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[key(rec)].append(rec)
    for recs in groups.values():
        recs.sort(key=lambda r: (str(seed_of(r)), str(r["_path"])))
    return dict(groups)


def newest(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The newest record (by date, then path)."""
    return max(records, key=lambda r: (str(r.get("date", "")), str(r["_path"])))


def run_key(rec: dict[str, Any]) -> tuple:
    """A run's cell: task, backend, preset, seed-free config, and the store it came from."""
    return (rec.get("task"), rec.get("backend"), rec.get("preset", "default"), config_key(rec), rec["_store"])


RUN_FIELDS = ("task", "backend", "config", "metrics")  # what a run record needs to be a cell member


def incomplete(record: dict[str, Any]) -> list[str]:
    """The RUN_FIELDS a run record lacks (a stub, a hand-written or truncated record); [] for other kinds."""
    if record.get("kind") != "run":
        return []
    return [k for k in RUN_FIELDS if not record.get(k)]


def one_per_seed(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the runs that count, in their order; the records left out): one record per (cell, seed), the newest. Two
    records of one run directory whose accuracies differ are a DataCorruptError naming both (see the module)."""
    left_out: list[dict[str, Any]] = []
    for (*_, seed), recs in group_by(runs, lambda r: (run_key(r), str(seed_of(r)))).items():
        if len(recs) < 2 or seed == "None":
            continue
        _check_agree(recs)
        keep = newest(recs)
        left_out += [r for r in recs if r is not keep]
    dropped = {id(r) for r in left_out}
    return [r for r in runs if id(r) not in dropped], left_out


def _check_agree(recs: list[dict[str, Any]]) -> None:
    for rec in recs:
        for other in recs:
            if other is rec or not rec.get("run_dir") or rec.get("run_dir") != other.get("run_dir"):
                continue
            ours, theirs = (
                tuple((r.get("metrics") or {}).get(k) for k in ("test_acc", "val_acc")) for r in (rec, other)
            )
            if ours != theirs:
                raise DataCorruptError(
                    f"results store: {rec['_path']} and {other['_path']} are two records of one run "
                    f"({rec['run_dir']}) with different results (test, val accuracy {ours} and {theirs}); remove the "
                    "one that is wrong"
                )


@functools.cache
def _current_config(task: str, preset: str, backend: str) -> str | None:
    """The seed-free config that a run of `backend` on `task` and `preset` would have now (its own attention block
    only, as runs store it)."""
    from lra.core.errors import LraError
    from lra.train.config import load_config

    try:
        config = load_config(task, None if preset == "default" else preset, backend=backend).for_backend(backend)
    except (LraError, KeyError, ValueError):
        return None
    return json.dumps(seed_free_config(config), sort_keys=True, default=str)


def is_canonical(rec: dict[str, Any]) -> bool:
    """Whether a run used its task's config and preset exactly as `configs/` holds them now (any seed)."""
    config = rec.get("config")
    if not isinstance(config, dict) or not rec.get("task"):
        return False
    current = _current_config(rec["task"], rec.get("preset") or "default", rec.get("backend") or "")
    return current == json.dumps(seed_free_config(config), sort_keys=True, default=str)


def config_changes(rec: dict[str, Any], limit: int = 3) -> str:
    """The settings where a run's config differs from the current one of its preset ('train.steps=200, ...')."""
    current = _current_config(rec.get("task", ""), rec.get("preset") or "default", rec.get("backend") or "")
    if current is None:
        return "preset not in configs/"
    ours, now = flat_settings(seed_free_config(rec.get("config") or {})), flat_settings(json.loads(current))
    diffs = [f"{k}={ours.get(k, '(unset)')}" for k in sorted(set(ours) | set(now)) if ours.get(k) != now.get(k)]
    more = f", +{len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(diffs[:limit]) + more


def task_order(tasks: Iterable[str]) -> list[str]:
    """`tasks` in leaderboard order: LRA's five, the registry's other tasks by image size, then unknown ones."""
    from tasks import TASKS

    others = sorted(set(TASKS.names()) - set(LRA_TASKS), key=lambda t: (getattr(TASKS.get(t), "resolution", 0), t))
    known = [*LRA_TASKS, *others]
    present = set(tasks)
    return [t for t in known if t in present] + sorted(present - set(known))
