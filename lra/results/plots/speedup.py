"""The speed-up figure of a block of training benchmarks (`lra bench train`): steps/s over naive per task, beside
the FlashAttention paper's average speed-up for its recipe."""

from __future__ import annotations

from pathlib import Path

from lra.results.aggregate import task_order
from lra.results.plots.canvas import colours, pyplot, save
from lra.results.published import FLASH_PAPER_SPEEDUP, SPEEDUP_PRESET
from lra.results.speed import Block
from lra.results.table import Figure


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
