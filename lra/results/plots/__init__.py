"""The leaderboard's PNG figures (the `plots` extra: matplotlib), one module per family: `accuracy_spread` (accuracy
per task with the seed spread), `curves` (learning curves, time to accuracy), `campaigns` (stages against
device-hours), `speedup` (training speed-up over naive), `lengths` (kernel and training time and memory against
sequence length) and `deviation` (the numerics study); `canvas` holds what they share. Without matplotlib nothing is
drawn and no error is raised; the page says how to get them.

Figures are deterministic for the same records: fixed sizes and colours, sorted series, no timestamps in the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lra.results.accuracy import preset_order
from lra.results.aggregate import group_by, is_canonical, one_per_seed
from lra.results.plots.accuracy_spread import accuracy_figure
from lra.results.plots.campaigns import campaign_curves
from lra.results.plots.canvas import pyplot, slug
from lra.results.plots.curves import learning_curves, time_to_accuracy_figure
from lra.results.plots.deviation import numerics_figures
from lra.results.plots.lengths import attention_figures, train_length_figures
from lra.results.plots.speedup import speedup_figure
from lra.results.speed import speed_blocks
from lra.results.table import Figure


def write_plots(records: list[dict[str, Any]], out_dir: Path) -> list[Figure]:
    """Every figure the records support, under `out_dir`/plots; [] without matplotlib."""
    if pyplot() is None:
        return []
    plot_dir = Path(out_dir) / "plots"
    figures = run_figures(records, plot_dir)
    figures += attention_figures([r for r in records if r.get("kind") == "bench_attention"], plot_dir)
    figures += train_length_figures([r for r in records if r.get("kind") == "bench_train"], plot_dir)
    return figures + numerics_figures(records, plot_dir)


def run_figures(records: list[dict[str, Any]], plot_dir: Path) -> list[Figure]:
    """Every figure of training runs and training benchmarks the records support."""
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
