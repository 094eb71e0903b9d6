"""Plots of training runs and training benchmarks: accuracy per task and backend with the seed spread beside the
published values, training speed-up per task, time to accuracy, and learning curves (validation accuracy against
steps and wall-clock) from the evaluation history each run record carries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.results.accuracy import PRESET_TITLES, preset_order
from lra.results.aggregate import aggregate, group_by, is_canonical, one_per_seed, task_order
from lra.results.plotting import colours, grid, pyplot, save, slug
from lra.results.published import FLASH_PAPER_SPEEDUP, SPEEDUP_PRESET, paper_for
from lra.results.speed import Block, speed_blocks
from lra.results.table import Figure
from lra.results.time_to_accuracy import (
    CAMPAIGN_TARGETS,
    blocks,
    campaign_hours,
    campaign_key,
    reached,
    targets,
)


def run_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Every run and training-benchmark plot the records support."""
    runs = one_per_seed([r for r in records if r.get("kind") == "run" and r.get("preset") != "tiny"])[0]
    canonical = [r for r in runs if is_canonical(r)]
    figures = []
    for preset in preset_order({r.get("preset", "default") for r in canonical}):
        mine = [r for r in canonical if r.get("preset", "default") == preset]
        figures.append(accuracy_figure(mine, preset, plot_dir / f"accuracy-{slug(preset)}.png"))
        figures.append(time_to_accuracy_figure(mine, preset, plot_dir / f"time-to-accuracy-{slug(preset)}.png"))
    bench = [r for r in records if r.get("kind") == "bench_train" and r["world_size"] == 1]
    for block in speed_blocks(bench):
        mode = "" if block.compile == "none" else f"-compile-{block.compile}"
        path = plot_dir / f"speedup-{slug(block.preset)}{mode}-{slug(block.device)}.png"
        figures.append(speedup_figure(block, path))
    for (task, preset), recs in sorted(group_by(runs, lambda r: (r.get("task"), r.get("preset"))).items(), key=str):
        figures.append(learning_curves(recs, task, preset, plot_dir / f"curves-{slug(task)}-{slug(preset)}.png"))
    figures.append(campaign_curves([r for r in runs if isinstance(r.get("campaign"), dict)], plot_dir))
    return [f for f in figures if f is not None]


def _series(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Runs by (series label, task): the backend, with the store when several stores hold runs."""
    stores = {r["_store"] for r in runs}
    label = (lambda r: r["backend"]) if len(stores) == 1 else (lambda r: f"{r['backend']} ({r['_store']})")
    return group_by(runs, lambda r: (label(r), r.get("task")))


def accuracy_figure(runs: list[dict[str, Any]], preset: str, path: Path) -> Figure | None:
    """Mean ± std test accuracy per task and backend, every seed as a dot, the paper's value as a hollow diamond."""
    if not runs:
        return None
    plt, paper = pyplot(), paper_for(preset)
    series = _series(runs)
    tasks, labels = task_order({t for _, t in series}), sorted({b for b, _ in series})
    palette, width = colours(plt, labels), 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(tasks) + 2), 4))
    for i, label in enumerate(labels):
        for j, task in enumerate(tasks):
            recs = series.get((label, task))
            accs = [100 * r["metrics"]["test_acc"] for r in recs or [] if r["metrics"].get("test_acc") is not None]
            if not accs:
                continue
            x, agg, colour = j + (i - (len(labels) - 1) / 2) * width, aggregate(accs), palette[label]
            ax.scatter([x] * len(accs), accs, s=10, color=colour, alpha=0.5, zorder=3)
            first = label not in ax.get_legend_handles_labels()[1]
            ax.errorbar(x, agg.mean, yerr=agg.std or 0, fmt="o", color=colour, capsize=3, zorder=4,
                        label=label if first else None)  # fmt: skip
            published = _published(paper, recs[0]["backend"], task)
            if published is not None:
                ax.scatter([x], [published], marker="D", s=40, facecolors="none", edgecolors=colour, zorder=5)
    if paper:
        ax.scatter([], [], marker="D", facecolors="none", edgecolors="grey", label=f"{paper.name} (published)")
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_xlim(-0.5, len(tasks) - 0.5)
    ax.set_ylabel("test accuracy (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(f"Accuracy, preset {preset}: {PRESET_TITLES.get(preset, 'configs/ as written')}")
    fig.tight_layout()
    caption = f"Test accuracy per task and backend, preset {preset}: mean ± std over seeds, dots = single seeds"
    caption += f", hollow diamonds = the {paper.name}'s value for the same attention." if paper else "."
    return Figure(save(fig, path), caption, "accuracy")


def _published(paper, backend: str, task: str) -> float | None:
    if paper is None or backend not in paper.counterparts:
        return None
    return paper.rows.get(paper.counterparts[backend], {}).get(task)


def speedup_figure(block: Block, path: Path) -> Figure | None:
    """Training speed-up over naive per task, one bar per backend (error bar = std over repeated benchmarks)."""
    values = {k: block.speedup(*k) for k in block.chosen if k[1] != "naive"}
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return None
    tasks, backends = task_order({t for t, _ in values}), sorted({b for _, b in values})
    plt = pyplot()
    palette = colours(plt, backends)
    width = 0.8 / len(backends)
    fig, ax = plt.subplots(figsize=(min(11, 2 * len(tasks) + 4), 4.5))
    for i, b in enumerate(backends):
        xs = [j + (i - (len(backends) - 1) / 2) * width for j, t in enumerate(tasks) if (t, b) in values]
        aggs = [values[(t, b)] for t in tasks if (t, b) in values]
        ax.bar(xs, [a.mean for a in aggs], width, yerr=[a.std or 0 for a in aggs], color=palette[b], label=b)
    ax.axhline(1.0, color="black", linewidth=0.8)
    if block.preset == SPEEDUP_PRESET:
        x = FLASH_PAPER_SPEEDUP["FlashAttention"]
        ax.axhline(x, color="grey", linestyle="--", linewidth=0.8, label=f"FlashAttention paper, {x}x (published)")
    ax.set_xticks(range(len(tasks)), [f"{t}\n(N={block.seq_of[t]})" for t in tasks])
    ax.set_ylabel("training steps/s over naive")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=6, ncol=4)
    mode = "" if block.compile == "none" else f", compile {block.compile}"
    ax.set_title(f"Training speed-up over naive ({block.device}, preset {block.preset}{mode})")
    fig.tight_layout()
    caption = f"Training speed-up over naive per task ({block.device}, preset {block.preset}{mode}; lra bench train)."
    return Figure(save(fig, path), caption, "speed")


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


def learning_curves(runs: list[dict[str, Any]], task: str, preset: str, path: Path) -> Figure | None:
    """Validation accuracy against step and against wall-clock seconds, one line per run (colour = backend)."""
    runs = [r for r in runs if r.get("history")]
    if not runs:
        return None
    plt = pyplot()
    series = _series(runs)
    palette = colours(plt, {b for b, _ in series})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for (label, _), recs in sorted(series.items()):
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


def campaign_curves(stages: list[dict[str, Any]], plot_dir: Path) -> Figure | None:
    """Validation accuracy against the campaign's device-hours, a panel per campaign, one line per stage, so that
    every stage's curve sits where the campaign had spent its time (the paper's figures as dotted lines)."""
    by_campaign = group_by([r for r in stages if r.get("history")], campaign_key)
    if not by_campaign:
        return None
    plt = pyplot()
    keys = sorted(by_campaign)
    palette = colours(plt, {r.get("task") for recs in by_campaign.values() for r in recs})
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 3.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for rec in sorted(by_campaign[key], key=lambda r: r["campaign"].get("stage", 0)):
            hist = [h for h in rec["history"] if h.get("val_acc") is not None]
            hours = [campaign_hours(rec, h["time"]) for h in hist]
            ax.plot(hours, [100 * h["val_acc"] for h in hist], color=palette[rec.get("task")], label=rec.get("task"))
        for target in CAMPAIGN_TARGETS:
            ax.axhline(100 * target, color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(f"{key[0]} ({key[1]})")
        grid(ax, "device-hours, all stages counted", "validation accuracy (%)", legend=True)
    fig.tight_layout()
    caption = (
        "Campaigns: validation accuracy of every stage against the campaign's device-hours (earlier stages' whole"
        " sessions plus this stage's training time); dotted: the FlashAttention paper's 56.0 / 61.4 / 63.1."
    )
    return Figure(save(fig, plot_dir / "campaigns.png"), caption, "time")
