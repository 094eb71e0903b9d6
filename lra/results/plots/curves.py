"""Figures from each run's evaluation history: learning curves (validation accuracy against steps and wall-clock)
and time to accuracy (seconds to the time-to-accuracy table's targets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.results.aggregate import task_order
from lra.results.plots.canvas import colours, grid, pyplot, save, series
from lra.results.table import Figure
from lra.results.time_to_accuracy import blocks, reached, targets


def learning_curves(runs: list[dict[str, Any]], task: str, preset: str, path: Path) -> Figure | None:
    """Validation accuracy against step and against wall-clock seconds, one line per run (colour = backend)."""
    runs = [r for r in runs if r.get("history")]
    if not runs:
        return None
    plt = pyplot()
    by_label = series(runs)
    palette = colours(plt, {b for b, _ in by_label})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (label, _), recs in sorted(by_label.items()):
        for n, r in enumerate(recs):
            hist = [h for h in r["history"] if h.get("val_acc") is not None]
            acc = [100 * h["val_acc"] for h in hist]
            style = dict(color=palette[label], linewidth=1, alpha=0.8, label=label if n == 0 else None)
            ax1.plot([h["step"] for h in hist], acc, **style)
            ax2.plot([h["time"] for h in hist], acc, **style)
    grid(ax1, "training step", "validation accuracy (%)", legend=True)
    grid(ax2, "training seconds (wall-clock)", "validation accuracy (%)")
    fig.suptitle(f"Learning curves, {task}, preset {preset} (one line per seed)")
    fig.tight_layout()
    caption = f"Validation accuracy against steps and wall-clock seconds, {task}, preset {preset}, one line per run."
    return Figure(save(fig, path), caption, "time")


def _target_points(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[tuple[float, Any]]]:
    """(task, series label) -> [(target %, seconds Agg)] at each block's targets, for the seeds that reached them."""
    stores = {r["_store"] for r in runs}
    points = {}
    for (task, _, _, store), by_backend in blocks(runs).items():
        tgts = targets(by_backend) or ()
        for backend, recs in by_backend.items():
            pts = [(100 * t, reached(recs, t).seconds) for t in tgts]
            pts = [(x, agg) for x, agg in pts if agg is not None]
            if pts:
                points[(task, backend if len(stores) == 1 else f"{backend} ({store})")] = pts
    return points


def time_to_accuracy_figure(runs: list[dict[str, Any]], preset: str, path: Path) -> Figure | None:
    """Seconds to each of a task's targets (the table's), a panel per task, a line per backend (mean ± std over the
    seeds that reached the target)."""
    points = _target_points(runs)
    if not points:
        return None
    plt = pyplot()
    tasks = task_order({t for t, _ in points})
    palette = colours(plt, {b for _, b in points})
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        mine = {label: pts for (t, label), pts in sorted(points.items()) if t == task}
        for label, pts in mine.items():
            xs, aggs = [x for x, _ in pts], [a for _, a in pts]
            yerr = [a.std or 0 for a in aggs]
            ax.errorbar(xs, [a.mean for a in aggs], yerr=yerr, marker="o", capsize=3, color=palette[label], label=label)
        ax.set_xticks(sorted({x for pts in mine.values() for x, _ in pts}))
        ax.set_title(task)
        grid(ax, "validation accuracy target (%)", "training seconds (wall-clock)", legend=True)
    fig.suptitle(f"Time to accuracy, preset {preset}")
    fig.tight_layout()
    caption = (
        f"Wall-clock seconds until validation accuracy first reached each task's targets, preset {preset}: 50%, 90%"
        " and 100% of the way from the majority class to the lowest backend's mean best validation accuracy; mean ±"
        " std over the seeds that reached it (steps in the table)."
    )
    return Figure(save(fig, path), caption, "time")
