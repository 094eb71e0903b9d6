"""`lra bench attention|tiles|train`: argument parsing, tables and record storage."""

from __future__ import annotations

import argparse

from lra.cli.args import add_device, add_results, check_nproc, csv_list, int_list
from lra.core.progress import console, out
from lra.core.tables import Column, fitted_table, print_table


def _store(records, results) -> None:
    from lra.results.store import save_record

    for rec in records:
        save_record(rec, results)
    console.print(f"stored {len(records)} record(s) in the results store")


TRAIN_COLUMNS = (
    Column("backend"), Column("seq", "right"), Column("compile", drop=5), Column("status", wrap=True, drop=1),
    Column("ms/step", "right"), Column("steps/s", "right", drop=3), Column("tokens/s", "right", drop=4),
    Column("peak MB", "right", drop=6), Column("compile s", "right", drop=7), Column("vs eager", "right", drop=8),
    Column("vs naive", "right", drop=2),
)  # fmt: skip


def train_table(recs: list[dict], title: str, *, width: int, wide: bool = False):
    """The `bench train` records as a table fitted into `width` columns (`wide`: every column)."""
    from rich.markup import escape

    rows = []
    for r in recs:
        m, c = r["metrics"], r["compile"]
        rows.append([
            r["backend"], str(r["seq_len"]), c["mode"] + (" (fallback)" if c["fallback"] else ""), escape(r["status"]),
            f"{m['ms_per_step']:.1f}" if m else "-", f"{m['steps_per_s']:.2f}" if m else "-",
            f"{m['tokens_per_s']:,.0f}" if m else "-",
            f"{m['peak_mem_mb']:,.0f}" if m and m.get("peak_mem_mb") else "-",
            f"{m['compile_s']:.1f}" if m and c["mode"] != "none" else "-",
            f"{m['speedup_vs_eager']:.2f}x" if m.get("speedup_vs_eager") else "-",
            f"{m['speedup_vs_naive']:.2f}x" if m.get("speedup_vs_naive") else "-",
        ])  # fmt: skip
    return fitted_table(title, TRAIN_COLUMNS, rows, width=width, wide=wide)


def cmd_bench_train(args) -> int:
    from lra.bench.train import Interrupted, bench_train
    from lra.core.signals import terminate_as_interrupt
    from lra.train import distributed as dist

    check_nproc(args.nproc)
    if args.nproc > 1:
        from lra.train.launch import launch_local

        return launch_local(args.nproc, args.argv)
    dist.init_from_env(args.device)
    main, code = dist.is_main(), 0
    try:
        with terminate_as_interrupt():  # `timeout` or a scheduler: keep what was measured, as Ctrl-C does
            recs = bench_train(
                args.task,
                csv_list(args.attn),
                preset=args.preset,
                overrides=args.overrides,
                seqs=int_list(args.seq) if args.seq else None,
                steps=args.steps,
                warmup=args.warmup,
                device=args.device,
                data_dir=args.data_dir,
                synthetic=args.synthetic,
                compile_modes=csv_list(args.compile) if args.compile else None,
            )
    except Interrupted as stop:
        recs, code = stop.records, 130
        if main:
            console.print(f"[yellow]interrupted[/]: keeping the {len(recs)} measurement(s) finished", highlight=False)
    finally:
        dist.shutdown()
    if not main:
        return code
    title = f"bench train {args.task} ({recs[0]['world_size']} process(es))" if recs else "bench train"
    print_table(out, train_table(recs, title, width=out.width, wide=args.wide), wide=args.wide)
    if not args.no_record:
        _store(recs, args.results)
    return code


def cmd_bench_attention(args) -> int:
    from lra.bench.attention import bench_attention, format_attention_table
    from lra.bench.variants import parse_variants
    from lra.core.dtypes import parse_dtype

    dtype = parse_dtype(args.dtype)
    variants = parse_variants(csv_list(args.attn), args.overrides)  # checked before anything is timed
    kwargs = {}
    if args.layout:
        kwargs["layout"] = args.layout
    if args.heads:
        kwargs["heads"] = args.heads
    rows = bench_attention(
        variants,
        int_list(args.seq),
        int_list(args.head_dim),
        dtype,
        batch_tokens=args.batch_tokens,
        batch=args.batch,
        modes=tuple(csv_list(args.modes)),
        device=args.device,
        dropout=args.dropout,
        **kwargs,
    )
    print_table(out, format_attention_table(rows, width=out.width, wide=args.wide), wide=args.wide)
    if not args.no_record:
        from lra.core.environment import environment
        from lra.core.records import bench_attention_record

        env = environment(args.device)
        _store([bench_attention_record(**r, env=env) for r in rows], args.results)
    return 0


def cmd_bench_tiles(args) -> int:
    from attention_impls import why_cannot_run
    from lra.bench.tile_tuner import format_tiles_table, tune_tiles
    from lra.core.errors import ConfigError, RunSetupError

    shape = tuple(int_list(args.shape)) if args.shape else None
    if shape is not None and len(shape) != 3:
        raise ConfigError(f"--shape {args.shape!r}: give batch,heads,seq, e.g. 64,2,16384")
    reason = why_cannot_run("flash", args.device)
    if reason:
        raise RunSetupError(f"lra bench tiles times flash's kernels: {reason}")
    record = tune_tiles(int_list(args.head_dim), dtype=args.dtype, dropout=args.dropout, shape=shape,
                        device=args.device, jobs=args.jobs)  # fmt: skip
    out.print(format_tiles_table(record))
    for res in record["results"]:
        fields = ", ".join(f"{k}={v}" for k, v in res["best"].items())
        out.print(f"    {res['head_dim']}: Tiles({fields}),", soft_wrap=True)
    if not args.no_record:
        _store([record], args.results)
    return 0


def add_parser(sub) -> None:
    """Add `bench` with its sub-commands to the `lra` sub-parsers `sub`."""
    p = sub.add_parser("bench", help="benchmarks: attention kernels, training steps")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_device(common, default="cuda", help="cpu, cuda or cuda:N (default: cuda)")
    add_results(common)
    wide = argparse.ArgumentParser(add_help=False)
    wide.add_argument("--wide", action="store_true", help="every column (default: what fits the terminal)")

    a = bsub.add_parser("attention", parents=[common, wide], help="forward and forward+backward time, TFLOP/s, memory")
    a.add_argument(
        "--attn",
        required=True,
        help="comma-separated backends, e.g. flash,sdpa_flash,naive; NAME@OPTION=VALUE times a variant beside its "
        "backend, e.g. flash,flash@block_m=32",
    )
    a.add_argument("--set", dest="overrides", action="append", default=[], metavar="BACKEND.OPTION=VALUE",
                   help="an option of a backend in --attn, e.g. --set flash.block_m=64 (repeatable; values read as "
                   "YAML, as lra run --set reads them)")  # fmt: skip
    a.add_argument("--seq", default="1024,4096,16384", help="comma-separated lengths (4k style allowed)")
    a.add_argument("--head-dim", default="64", help="comma-separated head dims")
    a.add_argument("--heads", type=int, default=None, help="heads (default 8 at head dim 64, else 512/head_dim)")
    a.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    a.add_argument("--batch-tokens", type=int, default=131072, help="batch * seq (default 131072)")
    a.add_argument("--modes", default="fwd,fwd_bwd")
    a.add_argument("--layout", default=None, help="block-sparse layout for sparse backends, e.g. butterfly")
    a.add_argument("--batch", type=int, default=None, help="batch size (default: batch-tokens // seq)")
    a.add_argument("--dropout", type=float, default=0.0, metavar="P", help="attention dropout (default 0)")
    a.set_defaults(func=cmd_bench_attention)

    tl = bsub.add_parser("tiles", parents=[common], help="tune the flash kernels' tiles per head dim")
    tl.add_argument("--head-dim", default="8,16,32,64,128", help="comma-separated head dims")
    tl.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    tl.add_argument("--dropout", type=float, default=0.0, metavar="P", help="attention dropout while timing")
    tl.add_argument("--shape", default=None, metavar="B,H,N", help="batch, heads, seq for every head dim")
    tl.add_argument("--jobs", type=int, default=1, help="processes that compile the candidates first")
    tl.set_defaults(func=cmd_bench_tiles)

    t = bsub.add_parser("train", parents=[common, wide], help="training steps/s, tokens/s, memory, speed-up vs naive")
    t.add_argument("task")
    t.add_argument("--attn", required=True, help="comma-separated backends, e.g. naive,flash,sdpa_flash")
    t.add_argument("--preset", default=None)
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    t.add_argument("--seq", default=None, help="sweep data.max_length, e.g. 1024,2048,4096")
    t.add_argument("--steps", type=int, default=20, help="timed steps per backend (median reported)")
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--data-dir", default=None)
    t.add_argument("--synthetic", action="store_true", help="random full-length tokens instead of the task's data")
    t.add_argument(
        "--compile",
        default=None,
        metavar="MODES",
        help="comma-separated train.compile modes to time, e.g. none,default,max (default: none and the config's)",
    )
    t.add_argument(
        "--nproc", type=int, default=1, help="time data-parallel steps over N local processes (DDP; global batch kept)"
    )
    t.set_defaults(func=cmd_bench_train)
