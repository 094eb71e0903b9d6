"""`lra numerics forward|weights`: argument parsing, tables, plots and record storage for the numerics study."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lra.cli.bench import csv_list, int_list
from lra.core.progress import console

FORWARD_EPILOG = """examples:
  lra numerics forward --attn naive,sdpa_math,flash_blockwise --seq 256,512 --draws 3 --device cpu
  lra numerics forward --attn naive,flash,sdpa_flash,sdpa_cudnn,flex --seq 1k,4k,16k --tiles default,128x64,64x128
  lra numerics forward --attn naive,flash --inputs outlier --dtype bf16,fp32
  TRITON_INTERPRET=1 lra numerics forward --attn naive,flash --seq 128 --heads 2 --device cpu   (flash on a CPU)
"""

WEIGHTS_EPILOG = """examples:
  lra numerics weights listops --preset tiny --attn-a naive --attn-b sdpa_math --device cpu
  lra numerics weights listops --preset tiny --attn-b flash --set train.steps=4000 --set train.eval_every=250
  lra numerics weights listops --preset tiny --control seeds          (only the two-seed control)
"""


def _options(items: list[str]) -> dict[str, dict[str, Any]]:
    """'flash.num_warps=8' -> {'flash': {'num_warps': 8}} (values read as YAML)."""
    from lra.train.config import yaml_load

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        name, dot, opt = key.strip().partition(".")
        if not sep or not dot or not name or not opt:
            raise ValueError(f"--option expects BACKEND.OPTION=VALUE (e.g. flash.num_warps=8), got {item!r}")
        out.setdefault(name, {})[opt] = yaml_load(raw) if raw.strip() else None
    return out


def _print_table(table) -> None:
    """Tables of this study are wide: when the output is not a terminal (a log), do not cut them at 80 columns."""
    if console.is_terminal:
        console.print(table)
    else:
        from rich.console import Console

        Console(stderr=True, width=max(console.width, 140)).print(table)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _plot_dir(args) -> Path:
    if args.plot_dir:
        return Path(args.plot_dir)
    from lra.results.store import results_dir

    store = Path(args.results) if args.results else results_dir()
    return store.parent / "plots"


def _default_backends() -> list[str]:
    """Every exact backend, plus block_sparse_flash (exact on its layout; measured against the masked golden)."""
    from attention_impls import BACKENDS

    names = [name for name, cls in BACKENDS.items() if cls.capabilities.exact]
    return names + (["block_sparse_flash"] if "block_sparse_flash" in BACKENDS else [])


def cmd_numerics_forward(args) -> int:
    from lra.core.environment import environment
    from lra.numerics.study import (
        ForwardSpec,
        format_forward_table,
        forward_records,
        forward_study,
        parse_dtypes,
        parse_tiles,
        plot_forward,
        status_lines,
    )
    from lra.results.store import save_record

    device = args.device or _default_device()
    spec = ForwardSpec(
        backends=csv_list(args.attn) if args.attn else _default_backends(),
        dtypes=parse_dtypes(csv_list(args.dtype)),
        seqs=int_list(args.seq)
        if args.seq
        else ([512, 1024, 2048, 4096, 8192, 16384] if device != "cpu" else [256, 512]),
        head_dim=args.head_dim,
        heads=args.heads,
        batch=args.batch,
        draws=args.draws,
        inputs=args.inputs,
        tiles=parse_tiles(csv_list(args.tiles)),
        device=device,
        seed=args.seed,
        options=_options(args.option),
    )
    rows = forward_study(spec)
    title = f"numeric deviation vs fp64 golden ({spec.inputs} inputs, {device})"
    _print_table(format_forward_table(rows, title))
    for line in status_lines(rows):
        console.print(f"[yellow]not run:[/] {line}", highlight=False)
    console.print(
        "max: max |out - golden| over elements and draws; +-draws: std of the per-draw max; mean, std: of "
        "|out - golden| over elements and draws; rel L2: ||out - golden|| / ||golden|| (mean over draws); "
        "/naive: max over naive's at the same dtype and length; ctrl (fp16/bf16): max|backend - naive fp32| / "
        "max|naive - naive fp32| on the same inputs; (tiles): the backend's defaults",
        highlight=False,
    )
    env = environment(device)
    records = forward_records(rows, spec, env)
    if not args.no_record:
        for rec in records:
            save_record(rec, args.results)
        console.print(f"stored {len(records)} record(s) (kind numerics_forward) in the results store")
    if not args.no_plots:
        stamp = env["date"].replace(":", "").replace("-", "")
        path = plot_forward(rows, _plot_dir(args) / f"numerics-forward-{spec.inputs}-{stamp}.png")
        console.print(f"wrote {path}" if path else "no plot: install the plots extra (matplotlib)")
    return 0


def cmd_numerics_weights(args) -> int:
    from lra.numerics.study import format_weights_tables, plot_weights, weights_study
    from lra.results.store import save_record

    controls = [] if args.control.strip().lower() == "none" else csv_list(args.control)
    record = weights_study(
        args.task,
        preset=args.preset,
        overrides=args.overrides,
        attn_a=args.attn_a,
        attn_b=args.attn_b,
        controls=controls,
        device=args.device,
        data_dir=args.data_dir,
        keep_runs=args.keep_runs,
        low=args.low,
        deterministic=not args.nondeterministic,
    )
    for table in format_weights_tables(record):
        _print_table(table)
    console.print(
        "W1: the Wasserstein-1 distance between the value distributions of the two runs' tensors (mean of "
        "|sort(W_A) - sort(W_B)|), averaged over tensors; max|dW|: the largest elementwise difference over tensors. "
        "Ratios: the A-vs-B slope over the control's (Golden et al.: flash about 2-5x below low precision, 0.2-0.5)."
    )
    if not args.no_record:
        console.print(f"stored {save_record(record, args.results)}")
    if not args.no_plots:
        stamp = record["date"].replace(":", "").replace("-", "")
        name = f"numerics-weights-{record['task']}-{record['backend_a']}-vs-{record['backend_b']}-{stamp}.png"
        path = plot_weights(record, _plot_dir(args) / name)
        console.print(f"wrote {path}" if path else "no plot: install the plots extra (matplotlib)")
    return 0


def add_numerics_parser(sub) -> None:
    """Add `numerics` with its `forward` and `weights` sub-commands to the `lra` sub-parsers `sub`."""
    p = sub.add_parser(
        "numerics",
        help="numeric deviation study (Golden et al. 2024): forward output vs fp64, weight drift in training",
    )
    nsub = p.add_subparsers(dest="numerics_cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--results", default=None, metavar="DIR", help="results store (default: leaderboard/results)")
    common.add_argument("--no-record", action="store_true", help="print only; store nothing")
    common.add_argument("--plot-dir", default=None, metavar="DIR", help="where PNGs go (default: the store's ../plots)")
    common.add_argument("--no-plots", action="store_true", help="skip the PNG plot")

    f = nsub.add_parser(
        "forward",
        parents=[common],
        help="each backend's output against naive attention in fp64 on the same inputs",
        description="Deviation of each backend's attention output from a golden value (naive attention in fp64 on "
        "the same inputs), over dtypes, lengths, tile shapes and repeated draws, with the naive-in-fp32 control.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=FORWARD_EPILOG,
    )
    f.add_argument(
        "--attn", default=None, help="comma-separated backends (default: every exact backend and block_sparse_flash)"
    )
    f.add_argument("--dtype", default="fp64,fp32,fp16,bf16", help="comma-separated dtypes (fp64 where supported)")
    f.add_argument(
        "--seq",
        default=None,
        help="comma-separated lengths, 4k style allowed (default: 512..16k on CUDA, 256,512 on the CPU)",
    )
    f.add_argument("--head-dim", type=int, default=64)
    f.add_argument("--heads", type=int, default=8)
    f.add_argument("--batch", type=int, default=1)
    f.add_argument("--draws", type=int, default=5, help="independent input draws per cell (default 5)")
    f.add_argument(
        "--inputs",
        choices=("normal", "outlier"),
        default="normal",
        help="N(0,1), or outlier: N(0,1) + N(0,100)*Bernoulli(0.001) (FlashAttention-3)",
    )
    f.add_argument(
        "--tiles",
        default="default",
        help="tile shapes BLOCK_MxBLOCK_N for tiled backends, e.g. default,128x64,64x128 (default: the backend's own)",
    )
    f.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="BACKEND.OPTION=VALUE",
        help="a backend option, e.g. flash.num_warps=8 (repeatable)",
    )
    f.add_argument("--seed", type=int, default=0, help="input seed")
    f.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    f.set_defaults(func=cmd_numerics_forward)

    w = nsub.add_parser(
        "weights",
        parents=[common],
        help="train twice (backend A, backend B) from one initialisation; weight distance at every evaluation",
        description="Train TASK's model from the same initialisation and data order with backend A and backend B, "
        "and compare weights at every evaluation (max |W_A - W_B|, Wasserstein-1). Controls: naive with two seeds, "
        "naive in bf16 autocast vs fp32. Runs go to a temporary folder and store no records of their own.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=WEIGHTS_EPILOG,
    )
    w.add_argument("task", help="task name or config YAML path")
    w.add_argument("--preset", default="tiny", help="config preset (default tiny)")
    w.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set train.steps=2000 (repeatable)",
    )
    w.add_argument("--attn-a", default="naive", help="backend A (default naive)")
    w.add_argument("--attn-b", default="flash", help="backend B (default flash)")
    w.add_argument("--control", default="seeds,amp", help="controls: seeds, amp, both (default) or none")
    w.add_argument("--low", choices=("bf16", "fp16"), default="bf16", help="autocast dtype of the amp control")
    w.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    w.add_argument("--data-dir", default=None, help="task data cache (default: $LRA_DATA or ~/.cache/lra/data)")
    w.add_argument(
        "--keep-runs",
        default=None,
        metavar="DIR",
        help="keep the run directories here (default: a temporary folder, removed afterwards)",
    )
    w.add_argument(
        "--nondeterministic",
        action="store_true",
        help="leave torch's deterministic algorithms off (default: on during the runs, so the zero control is zero)",
    )
    w.set_defaults(func=cmd_numerics_weights)
