"""Figures of the numerics study (deviation from an fp64 golden), from its result records alone:

- `plot_forward`: a forward sweep's max deviation against length, one panel per dtype (records `numerics_forward`);
- `plot_figure`: one PNG per figure of Golden et al. (records `numerics_figure`): Fig. 3 (against naive at each
  format), Fig. 4 (against the fp64 golden at each format), Fig. 5 (against length), Fig. 6 (against tile area;
  triangles mark swapped block dimensions) and the knobs figure (ratio to naive after one precision change);
- `plot_weights`: max |dW| and mean W1 against step, one line per pair (records `numerics_weights`).

Each returns None (or no paths) without matplotlib; `numerics_figures` gives the leaderboard's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from lra.results.plots.canvas import by_str_key, colours, grid, newest_by, pyplot, save, slug
from lra.results.table import Figure

DTYPE_ORDER = ("fp64", "fp32", "fp16", "bf16")


def plot_forward(rows: list[dict[str, Any]], path: str | Path) -> Path | None:
    """Max deviation against sequence length, one panel per dtype, one line per (implementation, tiles)."""
    plt = pyplot()
    ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["max"]) and r["max"] > 0]
    dtypes = [d for d in DTYPE_ORDER if any(r["dtype"] == d for r in ok)]
    if plt is None or not dtypes:
        return None

    def label(r: dict[str, Any]) -> str:
        return r["backend"] if r["tiles"] in ("-", "default") else f"{r['backend']} {r['tiles']}"

    labels = sorted({label(r) for r in ok})
    colors = colours(plt, labels)
    fig, axes = plt.subplots(1, len(dtypes), figsize=(4.5 * len(dtypes), 4), squeeze=False)
    for ax, d in zip(axes[0], dtypes):
        lines: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
        for r in ok:
            if r["dtype"] == d:
                lines[label(r)].append((r["seq"], r["max_mean"], r["max_std"]))
        for lab, pts in sorted(lines.items()):
            pts.sort()
            ax.errorbar(*zip(*pts), marker="o", color=colors[lab], label=lab, capsize=2)
        _axes(ax, "sequence length", "max |out - golden| (mean over draws)", d, logx=True)
    handles = [plt.Line2D([], [], color=colors[lab], marker="o", label=lab) for lab in labels]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(labels), 6), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(labels) / 6), 1, 1))
    return save(fig, Path(path))


def _axes(ax, xlabel: str, ylabel: str, title: str, logx: bool = False) -> None:
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    grid(ax, xlabel, ylabel)


def _lines(plt, ax, series: dict[str, list[dict[str, Any]]], key: str, xs: list[Any] | None = None) -> None:
    """One line per implementation: y = point[key]; categorical x when `xs` is given."""
    colors = colours(plt, series)
    for label, pts in sorted(series.items()):
        pts = [p for p in pts if p.get(key) and p[key] > 0 and math.isfinite(p[key])]
        if not pts:
            continue
        x = [xs.index(p["x"]) for p in pts] if xs else [p["x"] for p in pts]
        ax.errorbar(x, [p[key] for p in pts], yerr=[p["std"] for p in pts] if key == "max" else None,
                    marker="o", color=colors[label], label=label, capsize=2)  # fmt: skip
    if xs:
        ax.set_xticks(range(len(xs)), xs)
    ax.legend(fontsize=7)


def _tiles_plot(plt, ax, series: dict[str, list[dict[str, Any]]]) -> None:
    """Max deviation against tile area: squares joined by a line, swapped shapes as triangles (^ Br < Bc)."""
    colors = colours(plt, series)
    for label, pts in sorted(series.items()):
        if any("area" not in p for p in pts):  # an untiled baseline: a reference line
            ax.axhline(pts[0]["max"], color=colors[label], ls="--", lw=1, label=label)
            continue
        pts = sorted((p for p in pts if p["max"] > 0), key=lambda p: p["area"])
        square = [p for p in pts if p["br"] == p["bc"]]
        ax.plot([p["area"] for p in square], [p["max"] for p in square], marker="o", color=colors[label], label=label)
        for p in pts:
            if p["br"] != p["bc"]:
                ax.plot(p["area"], p["max"], marker="^" if p["br"] < p["bc"] else "v", color=colors[label], ls="")
    ax.legend(fontsize=7)


def _knobs_plot(ax, drivers: dict[str, list[dict[str, Any]]]) -> None:
    labels, values = [], []
    for base, changes in drivers.items():
        for c in changes:
            labels.append(f"{base.removeprefix('emu:')} {c['change']}")
            values.append(c["ratio"])
    ax.barh(range(len(values)), values, color="tab:blue")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("max |out - golden| / naive's (bf16)")
    ax.grid(alpha=0.3, axis="x")


def plot_figure(record: dict[str, Any], plot_dir: str | Path) -> list[Path]:
    """The PNG(s) of one `numerics_figure` record under `plot_dir` (formats gives Fig. 3 and Fig. 4)."""
    plt = pyplot()
    if plt is None:
        return []
    m, figure = record["metrics"], record["figure"]
    stem = f"numerics-{figure}-{record.get('inputs', 'normal')}-{slug(record.get('device', ''))}"
    n = (record.get("study") or {}).get("seqs", ["?"])
    panels = {
        "formats": [("fig3", "peer", "max |out - naive| at the same format", "Fig. 3: vs naive at each format"),
                    ("fig4", "max", "max |out - golden|", "Fig. 4: vs the fp64 golden at each format")],
        "length": [("fig5", "max", "max |out - golden| (bf16)", "Fig. 5: against sequence length")],
        "tiles": [("fig6", "max", "max |out - golden| (bf16)", f"Fig. 6: against tile area (N={n[0]})")],
        "knobs": [("knobs", "ratio", "", f"one precision change at a time (bf16, N={n[0]})")],
    }[figure]  # fmt: skip
    paths = []
    for tag, key, ylabel, title in panels:
        fig, ax = plt.subplots(figsize=(7, 4.5) if figure != "knobs" else (7, 6))
        if figure == "formats":
            xs = [d for d in DTYPE_ORDER if any(p["x"] == d for pts in m["series"].values() for p in pts)]
            _lines(plt, ax, m["series"], key, xs)
            _axes(ax, "format", ylabel, title)
        elif figure == "length":
            _lines(plt, ax, m["series"], key)
            _axes(ax, "sequence length", ylabel, title, logx=True)
        elif figure == "tiles":
            _tiles_plot(plt, ax, m["series"])
            _axes(ax, "tile area Br x Bc (triangles: swapped shapes, ^ Br < Bc)", ylabel, title, logx=True)
        else:
            _knobs_plot(ax, m.get("drivers", {}))
            ax.set_title(title, fontsize=9)
        fig.tight_layout()
        paths.append(save(fig, Path(plot_dir) / f"{stem}-{tag}.png"))
    return paths


def figure_plots(records: list[dict[str, Any]], plot_dir: str | Path) -> list[Path]:
    """The plots of the newest `numerics_figure` record per (figure, inputs, device)."""
    newest = newest_by(records, "numerics_figure", lambda r: (r["figure"], r.get("inputs"), r.get("device")))
    return [p for _, rec in by_str_key(newest) for p in plot_figure(rec, plot_dir)]


def plot_weights(record: dict[str, Any], path: str | Path) -> Path | None:
    """max |dW| and mean W1 against step, one line per pair (log scale); None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for pair, c in record["metrics"]["pairs"].items():
        for ax, key in zip(axes, ("max_abs", "w1_mean")):
            pts = [(s, v) for s, v in zip(c["steps"], c[key]) if v > 0]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=pair)
    for ax, ylabel in zip(axes, ("max |W_A - W_B| over tensors", "Wasserstein-1, mean over tensors")):
        _axes(ax, "training step", ylabel, "")
        ax.legend(fontsize=7)
    fig.suptitle(f"weight deviation: {record['task']} ({record['preset']})")
    fig.tight_layout()
    return save(fig, Path(path))


def numerics_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """The leaderboard's numerics figures: one forward-deviation plot per (device, inputs) from each backend's newest
    study, one weights plot per task, the plots of each numerics figure (Golden et al.'s Figs. 3-6)."""
    newest = newest_by(records, "numerics_forward", lambda r: (r.get("device"), r["inputs"], r["backend"]))
    weights = newest_by(records, "numerics_weights", lambda r: r["task"])
    studies: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for (device, inputs, _), r in newest.items():
        studies[(device, inputs)] += r["metrics"].get("rows", [])
    if studies or weights:
        plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for (device, inputs), rows in by_str_key(studies):
        name = f"numerics-forward-{inputs}-{str(device).replace(' ', '_')}.png"
        written += [p for p in [plot_forward(rows, plot_dir / name)] if p]
    for task, rec in sorted(weights.items()):
        written += [p for p in [plot_weights(rec, plot_dir / f"numerics-weights-{task}.png")] if p]
    return [Figure(p, _caption(p), "numerics") for p in written + figure_plots(records, plot_dir)]


def _caption(path: Path) -> str:
    kind = path.stem.removeprefix("numerics-").split("-")[0]
    study = {"weights": "weight deviation over training", "forward": "forward deviation against length"}
    return f"Numerics: {study.get(kind, 'Golden et al. figure')} ({path.stem.removeprefix('numerics-')})."
