"""The accuracy figure of a preset: test accuracy per task and backend with the seed spread, beside the value the
preset's paper published for the same attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.results.accuracy import PRESET_TITLES
from lra.results.aggregate import aggregate, task_order
from lra.results.plots.canvas import colours, pyplot, save, series
from lra.results.published import paper_for
from lra.results.table import Figure


def accuracy_figure(runs: list[dict[str, Any]], preset: str, path: Path) -> Figure | None:
    """Mean ± std test accuracy per task and backend, every seed as a dot, the paper's value as a hollow diamond."""
    if not runs:
        return None
    plt, paper = pyplot(), paper_for(preset)
    by_label = series(runs)
    tasks, labels = task_order({t for _, t in by_label}), sorted({b for b, _ in by_label})
    palette, width = colours(plt, labels), 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(tasks) + 2), 4))
    for i, label in enumerate(labels):
        for j, task in enumerate(tasks):
            recs = by_label.get((label, task))
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
