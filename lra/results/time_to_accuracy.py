"""Time to accuracy at targets chosen per block of comparable runs (one task, preset, config and store), and the
campaigns' stages in device-hours (`campaign_table`).

Fixed thresholds say little across LRA tasks (50% is chance on binary ones and out of reach on ten-class ones), so a
block's targets lie 50%, 90% and 100% of the way from the majority class to the weakest backend's mean best validation
accuracy: every backend is timed at the same accuracies, ones it reaches on average. Steps and seconds come from each
run's evaluation history (its first evaluation at or above the target), not from `metrics.time_to_acc_s`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from lra.results.accuracy import PRESET_TITLES, acc_cell, preset_order
from lra.results.aggregate import (
    SEEDS_NOTE,
    Agg,
    aggregate,
    fmt_agg,
    fmt_mean_std,
    group_by,
    is_canonical,
    newest,
    refs_of,
    run_key,
    task_order,
)
from lra.results.table import FEW_MARK, Cell, Row, Table, name, num

TARGET_FRACTIONS = (0.5, 0.9, 1.0)  # of the way from the majority class to the weakest backend's mean best val acc
HALF_POINTS_PER_ONE = 200  # targets are rounded down to 1/200 = 0.5 percentage points

TARGETS_NOTE = (
    "Targets, one set per task and config (the rows that list them): 50%, 90% and 100% of the way from the task's"
    " majority-class accuracy to the lowest of the backends' mean best validation accuracies, each rounded down to"
    " 0.5 points, so every backend is timed at the same accuracies and reaches the last one on average."
)
SHARED_GPU_NOTE = (
    "Runs of one sweep may share a GPU, which inflates their seconds but not their steps: steps compare how fast"
    " backends learn, seconds how fast they run only where the runs had the device to themselves."
)
NO_TARGETS = "targets (%) -: no majority-class accuracy recorded, or the lowest backend's mean does not beat it."
NO_HISTORY = (
    "A row of '-' has no learning curve: its run records carry no evaluation history (the `history` field, one"
    " {step, val_acc, time} per evaluation, stored by runs that record it)."
)

Block = tuple  # (task, preset, seed-free config key, store): run_key without the backend
Runs = list[dict[str, Any]]


@dataclass(frozen=True)
class Reached:
    """One backend's seeds at one target: steps and seconds of the seeds that reached it, out of `of` with history."""

    steps: Agg | None
    seconds: Agg | None
    of: int


def blocks(runs: Runs) -> dict[Block, dict[str, Runs]]:
    """Runs by block, then by backend (that backend's seeds); stores stay apart, as in every other table."""
    out: dict[Block, dict[str, Runs]] = defaultdict(dict)
    for (task, backend, preset, cfg, store), recs in group_by(runs, run_key).items():
        out[(task, preset, cfg, store)][str(backend)] = recs
    return dict(out)


def round_down(acc: float) -> float:
    """`acc` rounded down to 0.5 percentage points; float error in the sum (0.25 as 0.24999...) does not drop a step."""
    return math.floor(round(acc * HALF_POINTS_PER_ONE, 6)) / HALF_POINTS_PER_ONE


def majority_of(recs: Runs) -> float | None:
    """The task's majority-class accuracy, from the newest record that carries one."""
    having = [r for r in recs if r.get("metrics", {}).get("majority_acc") is not None]
    return float(newest(having)["metrics"]["majority_acc"]) if having else None


def targets(by_backend: dict[str, Runs]) -> tuple[float, ...] | None:
    """A block's target accuracies (fractions, one per TARGET_FRACTIONS); None without a majority-class accuracy or
    where the weakest backend's mean best validation accuracy does not beat it."""
    majority = majority_of([r for recs in by_backend.values() for r in recs])
    means = [aggregate(r.get("metrics", {}).get("val_acc") for r in recs) for recs in by_backend.values()]
    means = [a.mean for a in means if a is not None]
    if majority is None or not means or min(means) <= majority:
        return None
    top = min(means)
    return tuple(round_down(majority + f * (top - majority)) for f in TARGET_FRACTIONS)


def first_reach(rec: dict[str, Any], target: float) -> tuple[int, float] | None:
    """(step, seconds) of the run's first evaluation with validation accuracy >= `target`; None if none has it."""
    for h in rec.get("history") or []:
        if h.get("val_acc") is not None and h["val_acc"] >= target:
            return h["step"], h["time"]
    return None


def reached(recs: Runs, target: float) -> Reached:
    """Steps and seconds to `target` over the seeds that carry a history (the others cannot say)."""
    with_history = [r for r in recs if r.get("history")]
    hits = [p for p in (first_reach(r, target) for r in with_history) if p is not None]
    return Reached(aggregate(s for s, _ in hits), aggregate(t for _, t in hits), len(with_history))


def reach_cell(recs: Runs, target: float | None) -> Cell:
    """'250 ± 71 steps; 27 ± 4 s (n=2)', with 'k of m reached' when some seeds never got there; '-' without a
    target or a history."""
    got = None if target is None else reached(recs, target)
    if got is None or got.of == 0:
        return Cell("-")
    if got.steps is None or got.seconds is None:
        return Cell("not reached")
    n = got.steps.n
    text = f"{fmt_mean_std(got.steps, digits=0)} steps; {fmt_mean_std(got.seconds, digits=0)} s (n={n})"
    text += f" {FEW_MARK}" if got.steps.few else ""
    text += f", {n} of {got.of} reached" if n < got.of else ""
    return num(text, refs=refs_of(recs), few=got.steps.few)


def targets_text(tgts: tuple[float, ...]) -> str:
    """'26.5 / 34.0 / 36.0': the targets in %."""
    return " / ".join(f"{100 * t:.1f}" for t in tgts)


def time_to_accuracy_tables(runs: Runs) -> list[Table]:
    """One time-to-accuracy table per preset (the tiny smoke runs aside), in page order."""
    by_preset = group_by([r for r in runs if r.get("preset") != "tiny"], lambda r: r.get("preset", "default"))
    tables = [preset_table(by_preset[p], p) for p in preset_order(by_preset)]
    campaigns = campaign_table([r for r in runs if r.get("preset") != "tiny"])
    return tables + ([campaigns] if campaigns is not None else [])


def _block_order(runs: Runs):
    """Sort key of a block: task in leaderboard order, the configs/ settings before other configs, then by name."""
    order = task_order({r.get("task") for r in runs})

    def key(item: tuple[Block, dict[str, Runs]]) -> tuple:
        (task, _, cfg, store), by_backend = item
        canonical = is_canonical(next(iter(by_backend.values()))[0])
        return (order.index(task), not canonical, str(cfg), str(store))

    return key


def preset_table(runs: Runs, preset: str) -> Table:
    """Steps and seconds to each block's targets, one row per backend of a block (its seeds aggregated)."""
    rows, no_targets, no_history = [], False, False
    for (task, _, cfg, store), by_backend in sorted(blocks(runs).items(), key=_block_order(runs)):
        tgts = targets(by_backend)
        no_targets |= tgts is None
        config = "configs/" if is_canonical(next(iter(by_backend.values()))[0]) else str(cfg)[:8]
        for backend, recs in sorted(by_backend.items()):
            no_history |= not any(r.get("history") for r in recs)
            times = aggregate(r.get("metrics", {}).get("train_time_s") for r in recs)
            cells = [Cell(str(task)), Cell(config), name(backend), acc_cell(recs, "val_acc")]
            cells += [Cell("-") if tgts is None else num(targets_text(tgts))]
            cells += [reach_cell(recs, t) for t in tgts or (None,) * len(TARGET_FRACTIONS)]
            cells += [num(fmt_agg(times, digits=0), few=times is not None and times.few)]
            rows.append(Row([*cells, Cell(f"measured ({store})")]))
    header = ["task", "config", "backend", "best val acc", "targets (%)"]
    header += [f"target {i} ({100 * f:.0f}%)" for i, f in enumerate(TARGET_FRACTIONS, 1)]
    notes = [
        "Training steps and wall-clock seconds (evaluation included) until the validation accuracy first reached each"
        " target, from the runs' evaluation history: mean ± std over the seeds that reached it ('k of m reached':"
        f" only k of the m seeds with a history did). {SEEDS_NOTE}",
        TARGETS_NOTE,
        SHARED_GPU_NOTE,
    ]
    notes += [NO_TARGETS] if no_targets else []
    notes += [NO_HISTORY] if no_history else []
    title = f"Time to accuracy, preset {preset}: {PRESET_TITLES.get(preset, 'configs/ as written')}"
    return Table(title, [*header, "train time (s)", "source"], rows, notes, section="time")


# ---- campaigns (lra campaign): every stage's time to accuracy in device-hours, all stages counted
CAMPAIGN_TARGETS = (0.560, 0.614, 0.631)  # the FlashAttention paper's Path-X block-sparse / flash, Path-256 figures
CAMPAIGN_NOTE = (
    "One row per finished stage of a campaign (`lra campaign`: Pathfinder-32 -> Path-64 -> Path-X or Path-256, each"
    " stage from the last one's best checkpoint, carried across device sessions). Device-hours count every stage:"
    " 'stage' is the stage's own sessions (data drawing, compilation and evaluation included), 'at its end' adds"
    " every stage before it; 'to val >= X' is the earlier stages' device-hours plus this stage's training time to"
    " its first evaluation at or above X (56.0 / 61.4 / 63.1: the FlashAttention paper's block-sparse and flash"
    " Path-X and block-sparse Path-256 test accuracies)."
)


def campaign_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    """(campaign name, backend, store) of a stage record."""
    return (str(rec["campaign"].get("name")), str(rec.get("backend")), str(rec.get("_store")))


def campaign_hours(rec: dict[str, Any], seconds: float) -> float:
    """Device-hours of the campaign when this stage had trained `seconds`: every earlier stage's plus those."""
    return (float(rec["campaign"].get("device_s_before") or 0.0) + seconds) / 3600


def campaign_reach(rec: dict[str, Any], target: float) -> str:
    """'1.23 h (step 4,056)' at the stage's first evaluation at or above `target`, '-' if none."""
    hit = first_reach(rec, target)
    return "-" if hit is None else f"{campaign_hours(rec, hit[1]):.2f} h (step {hit[0]:,})"


def campaign_table(runs: Runs) -> Table | None:
    """The campaigns' stages with device-hours spent and to the paper's accuracies; None without campaign records."""
    stages = [r for r in runs if isinstance(r.get("campaign"), dict)]
    if not stages:
        return None
    rows = []
    for key, recs in sorted(group_by(stages, campaign_key).items()):
        for rec in sorted(recs, key=lambda r: r["campaign"].get("stage", 0)):
            c = rec["campaign"]
            where = f"{c.get('stage')}/{len(c.get('stages') or [])} {rec.get('task')}"
            start = f" from {c['init_from']}" if c.get("init_from") else ""
            own = float(c.get("device_s") or 0.0) / 3600
            cells = [Cell(key[0]), Cell(where + start), name(key[1])]
            cells += [acc_cell([rec], "val_acc"), acc_cell([rec], "test_acc"), num(f"{rec.get('steps', 0):,}")]
            cells += [num(f"{own:.2f}"), num(f"{campaign_hours(rec, float(c.get('device_s') or 0.0)):.2f}")]
            cells += [num(campaign_reach(rec, t)) for t in CAMPAIGN_TARGETS]
            rows.append(Row([*cells, Cell(f"measured ({key[2]})")]))
    header = ["campaign", "stage", "backend", "best val acc", "test acc", "steps", "stage (h)", "at its end (h)"]
    header += [f"to val >= {100 * t:.1f}" for t in CAMPAIGN_TARGETS]
    return Table("Campaigns: device-hours per stage, all stages counted", [*header, "source"], rows, [CAMPAIGN_NOTE],
                 section="time")  # fmt: skip
