"""PNG plots for the leaderboard (the `plots` extra: matplotlib): kernel time and memory against sequence length
with and without dropout, training throughput against length, the run plots (`lra.results.run_plots`) and the
numerics studies. Without matplotlib nothing is drawn and no error is raised; the page says how to get them.

Plots are deterministic for the same records: fixed sizes and colours, sorted series, no timestamps in the files.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from lra.results.kernels import attention_key
from lra.results.plotting import colours, grid, pyplot, save, slug
from lra.results.run_plots import run_figures
from lra.results.table import Figure


def write_plots(records: list[dict[str, Any]], out_dir: Path) -> list[Figure]:
    """Every plot the records support, under `out_dir`/plots; [] without matplotlib."""
    if pyplot() is None:
        return []
    plot_dir = Path(out_dir) / "plots"
    figures = run_figures(records, plot_dir)
    figures += attention_figures([r for r in records if r.get("kind") == "bench_attention"], plot_dir)
    figures += train_length_figures([r for r in records if r.get("kind") == "bench_train"], plot_dir)
    figures += [Figure(p, _numerics_caption(p), "numerics") for p in _numerics_plots(records, plot_dir)]
    return figures


def attention_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Per (device, dtype, head dim, mode): ms and peak memory against length; dashed lines = with dropout."""
    series: dict[tuple, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] == "ok" and r.get("seq") and r.get("ms") is not None:
            device, dtype, hd, mode, p = attention_key(r)
            series[(device, dtype, hd, mode)][(r["backend"], p)].append((r["seq"], r["ms"], r.get("peak_mem_mb")))
    figures = []
    for (device, dtype, hd, mode), lines in sorted(series.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if max(len({s for s, _, _ in pts}) for pts in lines.values()) < 2:
            continue
        path = plot_dir / f"attention-{mode}-{dtype}-d{hd}-{slug(device)}.png"
        title = f"attention {mode}, {dtype}, head dim {hd} ({device})"
        figures.append(Figure(_length_plot(lines, path, title, "ms per call"), _dropout_caption(title), "kernels"))
    return figures


def _dropout_caption(title: str) -> str:
    return f"Kernel time and peak memory against sequence length, {title}; dashed: with attention dropout."


def train_length_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Per task with a `lra bench train --seq` sweep: tokens/s and peak memory against length."""
    series: dict[tuple, dict[tuple, list]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["status"] == "ok" and r.get("seq_len") and r["world_size"] == 1:
            m = r["metrics"]
            key = (r.get("device"), r["task"])
            series[key][(r["backend"], 0.0)].append((r["seq_len"], m["tokens_per_s"], m.get("peak_mem_mb")))
    figures = []
    for (device, task), lines in sorted(series.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if max(len({s for s, _, _ in pts}) for pts in lines.values()) < 2:
            continue
        path = plot_dir / f"train-{slug(task)}-{slug(device)}.png"
        title = f"training {task} ({device})"
        caption = f"Training throughput and peak memory against sequence length, {task} ({device})."
        figures.append(Figure(_length_plot(lines, path, title, "tokens/s"), caption, "speed"))
    return figures


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


def _numerics_caption(path: Path) -> str:
    kind = path.stem.removeprefix("numerics-").split("-")[0]
    study = {"weights": "weight deviation over training", "forward": "forward deviation against length"}
    return f"Numerics: {study.get(kind, 'Golden et al. figure')} ({path.stem.removeprefix('numerics-')})."


def _numerics_plots(records: list[dict[str, Any]], plot_dir: Path) -> list[Path]:
    """One forward-deviation plot per (device, inputs) from each backend's newest study, one weights plot per task,
    the plots of each numerics figure (Golden et al.'s Figs. 3-6)."""
    from lra.results.numerics_plots import figure_plots, plot_forward, plot_weights

    newest: dict[tuple, dict[str, Any]] = {}
    weights: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("date", ""), r.get("_file", ""))):
        if r.get("kind") == "numerics_forward":
            newest[(r.get("device"), r["inputs"], r["backend"])] = r
        elif r.get("kind") == "numerics_weights":
            weights[r["task"]] = r
    studies: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for (device, inputs, _), r in newest.items():
        studies[(device, inputs)] += r["metrics"].get("rows", [])
    if studies or weights:
        plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for (device, inputs), rows in sorted(studies.items(), key=lambda kv: tuple(map(str, kv[0]))):
        name = f"numerics-forward-{inputs}-{str(device).replace(' ', '_')}.png"
        path = plot_forward(rows, plot_dir / name)
        written += [path] if path else []
    for task, rec in sorted(weights.items()):
        path = plot_weights(rec, plot_dir / f"numerics-weights-{task}.png")
        written += [path] if path else []
    return written + figure_plots(records, plot_dir)
