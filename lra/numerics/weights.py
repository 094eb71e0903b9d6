"""The weights study: how far attention's numeric deviation moves a model's weights in training, next to the
paper's controls (Golden et al. 2024, their Wasserstein-distance analysis).

The same model trains from the same initialisation and data order (and the same dropout draws: the trainer seeds
every step) once with the baseline A (default naive) and once with each B (default: the real `flash` kernel and the
all-bf16 FA1 emulation `emu:fa1-all`), all at the config's `train.amp` (bf16 autocast by default; on the CPU too).
Controls train `naive` the same way but for one difference: `seeds`, another initialisation (train.seed + 1, which
also reorders the data); `fp16`, fp16 autocast against fp32; `bf16`, bf16 autocast against fp32. At every evaluation,
per weight tensor: max |W_a - W_b| and the Wasserstein-1 distance between the two tensors' value distributions (exact
1-D optimal transport: the mean of |sort(W_a) - sort(W_b)|, see metrics.wasserstein1). Their growth is the
least-squares slope over steps; the ratios of each A-vs-B pair's slope and last value to each control's are the
paper's comparison (flash 2-5x below low-precision training).

Attention dropout is set to 0: backends draw their dropout masks differently, which would swamp the numerics.
fp16 training here is loss-scaled where the trainer scales it, on CUDA (lra.train.device.wants_loss_scaling); the
CPU's fp16 control trains unscaled. `loss_scaling` in the record says which.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lra.core.atomic import atomic_path
from lra.core.errors import ConfigError
from lra.core.records import numerics_weights_record
from lra.numerics.backend import implementation
from lra.numerics.metrics import ratio, slope, weight_distances
from lra.train.config import RunConfig

CONTROLS = ("seeds", "fp16", "bf16")
DEFAULT_B = ("flash", "emu:fa1-all")


@dataclass(frozen=True)
class RunSpec:
    """One training run: implementation label, seed and precision ('none' = fp32, 'bf16', 'fp16' autocast)."""

    backend: str
    seed: int
    amp: str


def weights_plan(
    attn_a: str, attn_b: list[str], seed: int, base_amp: str, controls: list[str]
) -> tuple[dict[str, RunSpec], dict[str, tuple[str, str]]]:
    """The runs (label -> spec) and the pairs compared (pair -> (label, label)).

    A and every B always train separately, even when they are the same spec (the zero control). A control reuses a
    run already planned with the same spec.
    """
    bad = sorted(set(controls) - set(CONTROLS))
    if bad:
        raise ConfigError(f"unknown control(s) {', '.join(bad)}; choose from {', '.join(CONTROLS)} (or none)")
    runs: dict[str, RunSpec] = {"a": RunSpec(attn_a, seed, base_amp)}
    pairs: dict[str, tuple[str, str]] = {}
    for i, b in enumerate(attn_b):
        runs[f"b{i}"] = RunSpec(b, seed, base_amp)
        pairs[f"{attn_a} vs {b}"] = ("a", f"b{i}")

    def label_for(spec: RunSpec, label: str) -> str:
        for existing, s in runs.items():
            if s == spec and not existing.startswith("b"):
                return existing
        runs[label] = spec
        return label

    if "seeds" in controls:
        first = label_for(RunSpec("naive", seed, base_amp), "naive_seed")
        pairs[f"naive seed {seed} vs {seed + 1}"] = (first, label_for(RunSpec("naive", seed + 1, base_amp), "seed2"))
    for low in ("fp16", "bf16"):
        if low in controls:
            full = label_for(RunSpec("naive", seed, "none"), "naive_fp32")
            pairs[f"naive fp32 vs {low}"] = (full, label_for(RunSpec("naive", seed, low), f"naive_{low}"))
    return runs, pairs


@contextlib.contextmanager
def deterministic(enabled: bool) -> Iterator[None]:
    """Deterministic kernels while the study trains (CUDA's atomics-based backward ops would otherwise add
    run-to-run noise to every pair, and the zero control would not be zero). Ops without one only warn."""
    if not enabled:
        yield
        return
    prev = torch.are_deterministic_algorithms_enabled()
    prev_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS's condition for reproducible results
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


def snapshotter(folder: Path):
    """An on_eval hook that stores the model's parameters at each evaluation step (atomically, on the CPU)."""
    folder.mkdir(parents=True, exist_ok=True)

    def on_eval(step: int, model: torch.nn.Module) -> None:
        state = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}
        with atomic_path(folder / f"step_{step:08d}.pt") as tmp:
            torch.save(state, tmp)

    return on_eval


def snapshots(folder: Path) -> dict[int, Path]:
    return {int(p.stem.split("_")[1]): p for p in sorted(folder.glob("step_*.pt"))}


def pair_curves(snap_a: dict[int, Path], snap_b: dict[int, Path]) -> dict[str, Any]:
    """Distances at every step both runs evaluated: aggregated curves, slopes and the per-tensor figures."""
    steps = sorted(set(snap_a) & set(snap_b))
    curve: dict[str, Any] = {"steps": steps, "max_abs": [], "w1_mean": [], "w1_max": [], "per_tensor": {}}
    for step in steps:
        a = torch.load(snap_a[step], map_location="cpu", weights_only=True)
        b = torch.load(snap_b[step], map_location="cpu", weights_only=True)
        dist = weight_distances(a, b)
        curve["max_abs"].append(max(d["max_abs"] for d in dist.values()))
        curve["w1_mean"].append(float(np.mean([d["w1"] for d in dist.values()])))
        curve["w1_max"].append(max(d["w1"] for d in dist.values()))
        for name, d in dist.items():
            per = curve["per_tensor"].setdefault(name, {"max_abs": [], "w1": []})
            per["max_abs"].append(d["max_abs"])
            per["w1"].append(d["w1"])
    curve["slope_max_abs"] = slope(steps, curve["max_abs"])
    curve["slope_w1_mean"] = slope(steps, curve["w1_mean"])
    return curve


def run_config(config: RunConfig, spec: RunSpec) -> tuple[str, RunConfig]:
    """The backend name and config of one run: its seed, precision and (for an emulation) attention options, built
    as a variant of the study's config and checked as any config is."""
    name, options = implementation(spec.backend)
    # eager (train.compile none): the study compares attention numerics, not the compiler's fusions
    train = {"seed": spec.seed, "amp": spec.amp, "compile": "none"}
    return name, config.with_settings(overlay={"train": train, "attention": {name: options} if options else {}})


def _train_runs(config, runs: dict[str, RunSpec], root: Path, dev: torch.device, data_dir, det: bool):
    """Train every planned run into `root`/label; returns label -> {step: snapshot path}."""
    from lra.core.progress import console
    from lra.train.run import train

    snaps: dict[str, dict[int, Path]] = {}
    for i, (label, spec) in enumerate(runs.items(), 1):
        precision = "fp32" if spec.amp == "none" else f"{spec.amp} autocast"
        console.print(f"[bold]numerics weights[/] run {i}/{len(runs)}: {spec.backend}, seed {spec.seed}, {precision}")
        name, cfg = run_config(config, spec)
        with deterministic(det):
            train(
                cfg,
                name,
                out_dir=root / label,
                device=str(dev),
                data_dir=data_dir,
                on_eval=snapshotter(root / label / "weights"),
                cpu_amp=True,
            )
        snaps[label] = snapshots(root / label / "weights")
    return snaps


def _check(config: RunConfig, runs: dict[str, RunSpec], dev: torch.device, data_dir) -> None:
    """Every planned run through the run gate, before the first one trains."""
    from lra.train.gate import gate

    for spec in runs.values():
        name, cfg = run_config(config, spec)
        gate(cfg, name, dev, data_dir=data_dir)


def _last(curve: dict[str, Any], key: str) -> float | None:
    return curve[key][-1] if curve[key] else None


def control_ratios(curves: dict[str, Any], ab_pairs: list[str], control_pairs: dict[str, str]) -> dict[str, Any]:
    """For each A-vs-B pair over each control: the ratio of their growth (slopes) and of their last values, for the
    mean W1 and max |dW| (the seed control starts far apart, so its slope says less than its level)."""
    out: dict[str, Any] = {}
    for pair in ab_pairs:
        ab = curves[pair]
        for control, key in control_pairs.items():
            if key not in curves:
                continue
            c = curves[key]
            out[f"{pair} / {control}"] = {
                "slope_w1_mean": ratio(ab["slope_w1_mean"], c["slope_w1_mean"]),
                "slope_max_abs": ratio(ab["slope_max_abs"], c["slope_max_abs"]),
                "final_w1_mean": ratio(_last(ab, "w1_mean"), _last(c, "w1_mean")),
                "final_max_abs": ratio(_last(ab, "max_abs"), _last(c, "max_abs")),
            }
    return out


def weights_study(
    task: str,
    preset: str | None = "tiny",
    overrides: list[str] | None = None,
    attn_a: str = "naive",
    attn_b: list[str] | tuple[str, ...] = DEFAULT_B,
    controls: list[str] | tuple[str, ...] = CONTROLS,
    device: str | None = None,
    data_dir: str | None = None,
    keep_runs: str | Path | None = None,
    deterministic_runs: bool = True,
) -> dict[str, Any]:
    """Train the planned runs, compare their weights at every evaluation; returns the record (kind
    'numerics_weights'). Runs go to a temporary folder (or `keep_runs`) and write no result records of their own."""
    from lra.core.environment import environment
    from lra.train.config import load_config
    from lra.train.device import resolve_device, wants_loss_scaling

    config = load_config(task, preset, [*(overrides or []), "model.attention_dropout=0"])
    dev = resolve_device(device)
    seed, base_amp = config.train.seed, config.train.amp
    runs, pairs = weights_plan(attn_a, list(attn_b), seed, base_amp, list(controls))
    _check(config, runs, dev, data_dir)
    with contextlib.ExitStack() as stack:
        root = Path(keep_runs) if keep_runs else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        snaps = _train_runs(config, runs, root, dev, data_dir, deterministic_runs)
        curves = {pair: {**pair_curves(snaps[la], snaps[lb]), "runs": [asdict(runs[la]), asdict(runs[lb])]}
                  for pair, (la, lb) in pairs.items()}  # fmt: skip
    controls_by_name = {"seeds": f"naive seed {seed} vs {seed + 1}", "fp16": "naive fp32 vs fp16"}
    controls_by_name["bf16"] = "naive fp32 vs bf16"
    ab_pairs = [f"{attn_a} vs {b}" for b in attn_b]
    return numerics_weights_record(
        task=config.task,
        backend_a=attn_a,
        backends_b=list(attn_b),
        preset=config.preset,
        steps=config.train.steps,
        controls=list(controls),
        deterministic=deterministic_runs,
        loss_scaling=wants_loss_scaling(dev, torch.float16),
        metrics={"pairs": curves, "ratios": control_ratios(curves, ab_pairs, controls_by_name)},
        config=config.to_dict(),
        env=environment(dev),
    )
