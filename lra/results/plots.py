"""PNG plots (needs the `plots` extra: matplotlib): speed and memory against sequence length per backend, and the
numerics studies (forward deviation against length, weight deviation against training step)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from lra.core.atomic import atomic_path


def write_plots(records: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """One plot per (task) for `lra bench train --seq` sweeps and per (head dim, mode) for `lra bench attention`.

    Returns the files written; nothing (and no error) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    series: dict[tuple, dict[str, list[tuple[int, float, float | None]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("kind") == "bench_train" and r.get("status", "ok") == "ok" and r.get("seq_len"):
            m = r["metrics"]
            series[("train", r["task"])][r["backend"]].append((r["seq_len"], m["tokens_per_s"], m.get("peak_mem_mb")))
        elif r.get("kind") == "bench_attention" and r.get("status", "ok") == "ok":
            key = ("attention", f"{r['mode']}-{r['dtype']}-d{r['head_dim']}")
            series[key][r["backend"]].append((r["seq"], r["tflops"], r.get("peak_mem_mb")))
    written = []
    plot_dir = out_dir / "plots"
    for (kind, name), by_backend in sorted(series.items()):
        if max(len({s for s, _, _ in pts}) for pts in by_backend.values()) < 2:
            continue
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
        for backend, pts in sorted(by_backend.items()):
            pts = sorted(set(pts))
            xs = [p[0] for p in pts]
            ax1.plot(xs, [p[1] for p in pts], marker="o", label=backend)
            mem = [(p[0], p[2]) for p in pts if p[2] is not None]
            if mem:
                ax2.plot([m[0] for m in mem], [m[1] for m in mem], marker="o", label=backend)
        for ax, ylabel in ((ax1, "tokens/s" if kind == "train" else "TFLOP/s"), (ax2, "peak memory (MB)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        ax2.set_yscale("log")
        ax1.legend(fontsize=7)
        fig.suptitle(f"{kind}: {name}")
        fig.tight_layout()
        plot_dir.mkdir(parents=True, exist_ok=True)
        path = plot_dir / f"{kind}-{name}.png"
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)
        written.append(path)
    return written + _numerics_plots(records, plot_dir)


def _numerics_plots(records: list[dict[str, Any]], plot_dir: Path) -> list[Path]:
    """One forward-deviation plot per (device, inputs) from each backend's newest study; one weights plot per task."""
    from lra.numerics.study import plot_forward, plot_weights

    newest: dict[tuple, dict[str, Any]] = {}
    weights: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("date", ""), r.get("_file", ""))):
        if r.get("kind") == "numerics_forward":
            newest[(r.get("device"), r.get("inputs", "normal"), r["backend"])] = r
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
    return written
