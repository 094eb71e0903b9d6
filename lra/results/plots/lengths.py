"""Figures against sequence length: attention kernel time and peak memory (`lra bench attention`, dashed lines with
dropout) and training throughput and peak memory (`lra bench train --seq`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from lra.core.records import backend_label
from lra.results.aggregate import newest
from lra.results.kernels import attention_key
from lra.results.plots.canvas import by_str_key, colours, grid, pyplot, save, slug
from lra.results.table import Figure


def attention_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Per (device, dtype, head dim, mode): ms and peak memory against length, a line per backend with its options;
    dashed lines = with dropout. Only the figure's most common batch x length x heads is drawn, so every point of a
    figure does the same number of score rows (the bench's default: batch x length = 131,072 tokens)."""
    timed = [r for r in records if r["status"] == "ok" and r.get("seq") and r.get("ms") is not None]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in timed:
        groups[attention_key(r)[:4]].append(r)
    figures = []
    for (device, dtype, hd, mode), lines in _swept({k: _lines(v) for k, v in groups.items()}):
        path = plot_dir / f"attention-{mode}-{dtype}-d{hd}-{slug(device)}.png"
        title = f"attention {mode}, {dtype}, head dim {hd} ({device})"
        caption = f"Kernel time and peak memory against sequence length, {title}; dashed: with attention dropout."
        figures.append(Figure(_length_plot(lines, path, title, "ms per call"), caption, "kernels"))
    return figures


def _lines(records: list[dict[str, Any]]) -> dict[tuple, list]:
    """(backend label, dropout) -> [(N, ms, peak MB)] over the records at the most common batch x N x heads."""
    work = Counter(_rows(r) for r in records)
    modal = max(work, key=lambda w: (work[w], w))
    points: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if _rows(r) == modal:
            points[(backend_label(r), attention_key(r)[4], r["seq"])].append(r)
    lines: dict[tuple, list] = defaultdict(list)
    for (label, p, seq), recs in points.items():
        r = newest(recs)
        lines[(label, p)].append((seq, r["ms"], r.get("peak_mem_mb")))
    return lines


def train_length_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Per task with a `lra bench train --seq` sweep: tokens/s and peak memory against length."""
    lines_of: dict[tuple, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] == "ok" and r.get("seq_len") and r["world_size"] == 1:
            m = r["metrics"]
            key = (r.get("device"), r["task"])
            lines_of[key][(r["backend"], 0.0)].append((r["seq_len"], m["tokens_per_s"], m.get("peak_mem_mb")))
    figures = []
    for (device, task), lines in _swept(lines_of):
        path = plot_dir / f"train-{slug(task)}-{slug(device)}.png"
        title = f"training {task} ({device})"
        caption = f"Training throughput and peak memory against sequence length, {task} ({device})."
        figures.append(Figure(_length_plot(lines, path, title, "tokens/s"), caption, "speed"))
    return figures


def _rows(rec: dict[str, Any]) -> int:
    """Score rows a bench attention record timed: batch x N x heads."""
    return (rec.get("batch") or 0) * rec["seq"] * (rec.get("heads") or 0)


def _swept(lines_of: dict[tuple, dict[tuple, list]]) -> list[tuple[tuple, dict[tuple, list]]]:
    """The figures' line sets in key order, those with at least one line over two or more lengths."""
    return [(k, lines) for k, lines in by_str_key(lines_of) if max(len({s for s, *_ in p}) for p in lines.values()) > 1]


def _length_plot(lines: dict[tuple, list], path: Path, title: str, ylabel: str) -> Path:
    """Two panels against sequence length (log 2): the figure of merit and peak memory, a line per (backend, p)."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    palette = colours(plt, {b for b, _ in lines})
    for (backend, p), pts in sorted(lines.items()):
        pts = sorted(set(pts))
        style = dict(color=palette[backend], marker="o", markersize=3, linestyle="--" if p else "-")
        label = f"{backend}, dropout {p:g}" if p else backend
        ax1.plot([x for x, _, _ in pts], [y for _, y, _ in pts], label=label, **style)
        mem = [(x, m) for x, _, m in pts if m is not None]
        if mem:
            ax2.plot([x for x, _ in mem], [m for _, m in mem], **style)
    for ax, label in ((ax1, ylabel), (ax2, "peak memory (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        grid(ax, "sequence length", label)
    ax1.legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)
