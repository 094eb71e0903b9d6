"""`lra numerics forward|weights`: the numeric deviation study of Golden et al. (2024): arguments, tables, records
and plots (the study itself is lra.numerics)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lra.cli.args import add_data_dir, add_device, add_overrides, add_results, csv_list, int_list
from lra.core.errors import ConfigError
from lra.core.progress import console

FORWARD_EPILOG = """examples:
  lra numerics forward                       the paper's figures (3, 4, 5, 6 and knobs) at this device's sizes
  lra numerics forward --figure formats,length --seq 512,1k,2k,4k --fixed-seq 1024
  lra numerics forward --figure tiles --tiles 16x16,64x64,16x64,64x16 --attn emu:fa1-all,flash
  lra numerics forward --figure none --attn naive,sdpa_math,flash_blockwise --seq 256,512   (a plain sweep)
  lra numerics forward --figure none --attn naive,emu:fa1-all,emu:fa1-all+o=acc+block_n=16 --dtype bf16
implementations: registered backends (lra list) and emulations emu:PRESET[+KNOB=VALUE...], presets:
  {presets}
"""

CPU_LENGTHS = [256, 512, 1024, 2048]
GPU_LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]

WEIGHTS_EPILOG = """examples:
  lra numerics weights listops --preset tiny --attn-b flash_blockwise,emu:fa1-all --device cpu
  lra numerics weights listops --attn-b flash,emu:fa1-all --set train.steps=3000 --set train.eval_every=250
  lra numerics weights listops --preset tiny --attn-b flash_blockwise --control seeds          (one control only)
"""


def _options(items: list[str]) -> dict[str, dict[str, Any]]:
    """'flash.num_warps=8' -> {'flash': {'num_warps': 8}} (values read as YAML; the label ends at the last dot)."""
    from lra.train.config import yaml_load

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        label, dot, opt = key.strip().rpartition(".")
        if not sep or not dot or not label or not opt:
            raise ConfigError(f"--option expects IMPLEMENTATION.OPTION=VALUE (e.g. flash.num_warps=8), got {item!r}")
        out.setdefault(label, {})[opt] = yaml_load(raw) if raw.strip() else None
    return out


def _print_table(table) -> None:
    """Tables of this study are wide: when the output is not a terminal (a log), do not cut them at 80 columns."""
    if console.is_terminal:
        console.print(table)
    else:
        from rich.console import Console

        Console(stderr=True, width=max(console.width, 200)).print(table)


def _device(args) -> str:
    import torch

    return args.device or ("cuda" if torch.cuda.is_available() else "cpu")


def _plot_dir(args) -> Path:
    if args.plot_dir:
        return Path(args.plot_dir)
    from lra.results.store import results_dir

    return (Path(args.results) if args.results else results_dir()).parent / "plots"


def _store(records: list[dict[str, Any]], args) -> None:
    if args.no_record:
        return
    from lra.results.store import save_record

    for rec in records:
        save_record(rec, args.results)
    console.print(f"stored {len(records)} record(s) in the results store")


def _default_implementations(device: str, head_dim: int, figures: bool) -> list[str]:
    """Figures: every dense exact backend that runs here and every emulation preset. A plain sweep: every backend
    that is exact (on its own mask too: block-sparse layouts, compared with naive under that mask) and runs here."""
    from attention_impls import BACKENDS, why_cannot_run
    from lra.numerics.figures import EMULATIONS, runnable_backends

    if figures:
        return runnable_backends(device, head_dim) + EMULATIONS
    exact = [n for n, c in BACKENDS.items() if c.capabilities.exact or c.capabilities.exact_on_mask]
    return [n for n in exact if why_cannot_run(n, device, None, head_dim) is None]


def _figure_sizes(args, device: str):
    from lra.numerics.emulation import tiles_from_sram
    from lra.numerics.figures import DEFAULT_TILE_SWEEP, FigureSizes
    from lra.numerics.inputs import parse_tiles

    gpu = device != "cpu"
    return FigureSizes(
        seq=args.fixed_seq or (4096 if gpu else 1024),
        seqs=int_list(args.seq) if args.seq else (GPU_LENGTHS if gpu else CPU_LENGTHS),
        tiles=parse_tiles(csv_list(args.tiles) if args.tiles else DEFAULT_TILE_SWEEP),
        fixed_tiles=tiles_from_sram(args.sram, args.head_dim),
        heads=args.heads,
        head_dim=args.head_dim,
        batch=args.batch,
        draws=args.draws,
        inputs=args.inputs,
        device=device,
        seed=args.seed,
        options=_options(args.option),
    )


def _run_figures(args, device: str, figures: list[str], impls: list[str]) -> int:
    from lra.core.environment import environment
    from lra.numerics.figures import run_figure
    from lra.numerics.report import figure_record, figure_table, forward_records, verdict_lines
    from lra.results.plots.deviation import plot_figure

    sizes, env = _figure_sizes(args, device), environment(device)
    for figure in figures:
        result = run_figure(figure, impls, sizes)
        record = figure_record(result, env)
        _print_table(figure_table(record))
        for line in verdict_lines(record):
            console.print(line, highlight=False)
        records = [record] + (forward_records(result["rows"], result["spec"], env) if figure == "formats" else [])
        _store(records, args)
        if not args.no_plots:
            paths = plot_figure(record, _plot_dir(args))
            console.print(", ".join(f"wrote {p}" for p in paths) or "no plot: install the plots extra (matplotlib)")
    console.print("cells: max |out - golden| (mean over draws of the per-draw max), in brackets its ratio to naive's")
    return 0


def _run_sweep(args, device: str, impls: list[str]) -> int:
    from lra.core.environment import environment
    from lra.numerics.forward import ForwardSpec, forward_study
    from lra.numerics.inputs import parse_dtypes, parse_tiles
    from lra.numerics.report import FORWARD_NOTE, format_forward_table, forward_records, status_lines
    from lra.results.plots.deviation import plot_forward

    spec = ForwardSpec(
        backends=impls,
        dtypes=parse_dtypes(csv_list(args.dtype)),
        seqs=int_list(args.seq) if args.seq else ([512, 1024, 2048, 4096] if device != "cpu" else [256, 512]),
        head_dim=args.head_dim,
        heads=args.heads,
        batch=args.batch,
        draws=args.draws,
        inputs=args.inputs,
        tiles=parse_tiles(csv_list(args.tiles or "default")),
        device=device,
        seed=args.seed,
        options=_options(args.option),
    )
    rows = forward_study(spec)
    _print_table(format_forward_table(rows, f"numeric deviation vs fp64 golden ({spec.inputs} inputs, {device})"))
    for line in status_lines(rows):
        console.print(f"[yellow]not run:[/] {line}", highlight=False)
    console.print(FORWARD_NOTE, highlight=False)
    env = environment(device)
    _store(forward_records(rows, spec, env), args)
    if not args.no_plots:
        stamp = env["date"].replace(":", "").replace("-", "")
        path = plot_forward(rows, _plot_dir(args) / f"numerics-forward-{spec.inputs}-{stamp}.png")
        console.print(f"wrote {path}" if path else "no plot: install the plots extra (matplotlib)")
    return 0


def cmd_numerics_forward(args) -> int:
    from lra.numerics.figures import FIGURES

    device = _device(args)
    chosen = csv_list(args.figure)
    figures = list(FIGURES) if chosen == ["all"] else [] if chosen == ["none"] else chosen
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise ConfigError(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}, all or none")
    impls = csv_list(args.attn) if args.attn else _default_implementations(device, args.head_dim, bool(figures))
    return _run_figures(args, device, figures, impls) if figures else _run_sweep(args, device, impls)


def cmd_numerics_weights(args) -> int:
    from lra.numerics.report import WEIGHTS_NOTE, fmt, weights_tables
    from lra.numerics.weights import weights_study
    from lra.results.plots.deviation import plot_weights

    controls = [] if args.control.strip().lower() == "none" else csv_list(args.control)
    record = weights_study(
        args.task,
        preset=args.preset,
        overrides=args.overrides,
        attn_a=args.attn_a,
        attn_b=csv_list(args.attn_b),
        controls=controls,
        device=args.device,
        data_dir=args.data_dir,
        keep_runs=args.keep_runs,
        deterministic_runs=not args.nondeterministic,
    )
    for table in weights_tables(record):
        _print_table(table)
    for name, r in record["metrics"]["ratios"].items():
        growth = f"W1 {fmt(r['slope_w1_mean'], '.3g')}, max|dW| {fmt(r['slope_max_abs'], '.3g')}"
        final = f"W1 {fmt(r['final_w1_mean'], '.3g')}, max|dW| {fmt(r['final_max_abs'], '.3g')}"
        console.print(f"{name}: growth ratio {growth}; last-value ratio {final}", highlight=False)
    console.print(WEIGHTS_NOTE, highlight=False)
    _store([record], args)
    if not args.no_plots:
        stamp = record["date"].replace(":", "").replace("-", "")
        path = plot_weights(record, _plot_dir(args) / f"numerics-weights-{record['task']}-{stamp}.png")
        console.print(f"wrote {path}" if path else "no plot: install the plots extra (matplotlib)")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    add_results(parser)
    parser.add_argument("--plot-dir", default=None, metavar="DIR", help="where PNGs go (default: the store's ../plots)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def _add_forward(nsub) -> None:
    from lra.numerics.emulation import DEFAULT_SRAM, PRESETS

    presets = "\n  ".join(f"{name}: {p.about}" for name, p in PRESETS.items())
    f = nsub.add_parser(
        "forward",
        help="attention output of kernels and emulations against fp64 attention (Golden et al.'s Figs. 3-6)",
        description="The forward figures of Golden et al. (2024) for emulated FlashAttention and real kernels side by "
        "side: Figs. 3/4 (formats), 5 (length), 6 (tiles) and the knobs figure; or, with --figure none, a plain sweep.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=FORWARD_EPILOG.format(presets=presets),
    )
    _common(f)
    f.add_argument("--figure", default="all", help="formats, length, tiles, knobs (comma-separated), all or none")
    f.add_argument("--attn", default=None, help="implementations (default: exact backends that run here + emulations)")
    f.add_argument("--dtype", default="fp64,fp32,fp16,bf16", help="dtypes of a plain sweep (--figure none)")
    f.add_argument("--seq", default=None, help="lengths of Fig. 5 or of a plain sweep, e.g. 512,1k,4k")
    f.add_argument("--fixed-seq", type=int, default=None, help="length of Figs. 3, 4, 6, knobs (CPU 1024, GPU 4096)")
    f.add_argument("--tiles", default=None, help="BLOCK_MxBLOCK_N list: Fig. 6's sweep, or a plain sweep's tiles")
    f.add_argument("--sram", type=int, default=DEFAULT_SRAM, help="SRAM elements M: fixed tiles Bc=M/4d, Br=min(Bc,d)")
    f.add_argument("--head-dim", type=int, default=64)
    f.add_argument("--heads", type=int, default=8)
    f.add_argument("--batch", type=int, default=1)
    f.add_argument("--draws", type=int, default=3, help="independent input draws per cell (default 3)")
    f.add_argument("--inputs", choices=("normal", "outlier"), default="normal", help="N(0,1) or the FA3 outlier mix")
    f.add_argument("--option", action="append", default=[], metavar="IMPL.OPTION=VALUE", help="repeatable")
    f.add_argument("--seed", type=int, default=0, help="input seed")
    add_device(f, help="cpu or cuda (default: cuda when available)")
    f.set_defaults(func=cmd_numerics_forward)


def _add_weights(nsub) -> None:
    from lra.numerics.weights import CONTROLS, DEFAULT_B

    w = nsub.add_parser(
        "weights",
        help="train with A and B from one initialisation; weight distance at every evaluation, with controls",
        description="Train TASK's model from the same initialisation and data order with A and each B and compare "
        "weights at every evaluation (max |W_A - W_B|, Wasserstein-1), next to the controls: another seed, fp16 vs "
        "fp32, bf16 vs fp32 (naive). Runs go to a temporary folder and store no records of their own.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=WEIGHTS_EPILOG,
    )
    _common(w)
    w.add_argument("task", help="task name or config YAML path")
    w.add_argument("--preset", default="tiny", help="config preset (default tiny)")
    add_overrides(w, "train.steps=2000")
    w.add_argument("--attn-a", default="naive", help="baseline A (default naive)")
    w.add_argument("--attn-b", default=",".join(DEFAULT_B), help=f"comma-separated Bs (default {','.join(DEFAULT_B)})")
    w.add_argument("--control", default=",".join(CONTROLS), help=f"{', '.join(CONTROLS)} (default all) or none")
    add_device(w)
    add_data_dir(w)
    w.add_argument("--keep-runs", default=None, metavar="DIR", help="keep the run directories here")
    w.add_argument("--nondeterministic", action="store_true", help="leave torch's deterministic algorithms off")
    w.set_defaults(func=cmd_numerics_weights)


def add_numerics_parser(sub) -> None:
    """Add `numerics` with its `forward` and `weights` sub-commands to the `lra` sub-parsers `sub`."""
    p = sub.add_parser(
        "numerics",
        help="numeric deviation study (Golden et al. 2024): forward output vs fp64, weight drift in training",
    )
    nsub = p.add_subparsers(dest="numerics_cmd", required=True)
    _add_forward(nsub)
    _add_weights(nsub)
