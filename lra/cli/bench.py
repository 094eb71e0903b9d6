"""`lra bench attention|train` and `lra numerics forward|weights`: argument parsing and record storage."""

from __future__ import annotations

import argparse
import sys

from lra.core.progress import console, out


def csv_list(text: str) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']."""
    return [x.strip() for x in text.split(",") if x.strip()]


def int_list(text: str) -> list[int]:
    """'512,1k,4K' -> [512, 1024, 4096]; anything else is a clear error."""
    out = []
    for x in csv_list(text):
        x = x.lower()
        mult = 1024 if x.endswith("k") else 1
        try:
            out.append(int(x.rstrip("k")) * mult)
        except ValueError:
            raise ValueError(f"{x!r} is not a length; use integers such as 512,1024 or 1k,4k") from None
    return out


def _store(records, results) -> None:
    from lra.results.store import save_record

    for rec in records:
        save_record(rec, results)
    console.print(f"stored {len(records)} record(s) in the results store")


def cmd_bench_train(args) -> int:
    from rich.table import Table

    from lra.bench.train import bench_train
    from lra.train import distributed as dist

    if args.nproc > 1:
        from lra.train.launch import launch_local

        return launch_local(args.nproc, sys.argv[1:])
    dist.init_from_env(args.device)
    main = dist.is_main()
    try:
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
        )
    finally:
        dist.shutdown()
    if not main:
        return 0
    t = Table(title=f"bench train {args.task} ({recs[0]['world_size']} process(es))" if recs else "bench train")
    for col in ("backend", "seq", "status", "ms/step", "steps/s", "tokens/s", "peak MB", "vs naive"):
        t.add_column(col)
    for r in recs:
        m = r["metrics"]
        t.add_row(
            r["backend"],
            str(r["seq_len"]),
            r["status"][:60],
            f"{m['ms_per_step']:.1f}" if m else "-",
            f"{m['steps_per_s']:.2f}" if m else "-",
            f"{m['tokens_per_s']:,.0f}" if m else "-",
            f"{m['peak_mem_mb']:,.0f}" if m and m.get("peak_mem_mb") else "-",
            f"{m['speedup_vs_naive']:.2f}x" if m.get("speedup_vs_naive") else "-",
        )
    out.print(t)
    if not args.no_record:
        _store(recs, args.results)
    return 0


def cmd_bench_attention(args) -> int:
    from lra.bench.attention import bench_attention, format_attention_table
    from lra.core.dtypes import parse_dtype

    dtype = parse_dtype(args.dtype)
    kwargs = {}
    if args.layout:
        kwargs["layout"] = args.layout
    if args.heads:
        kwargs["heads"] = args.heads
    rows = bench_attention(
        csv_list(args.attn),
        int_list(args.seq),
        int_list(args.head_dim),
        dtype,
        batch_tokens=args.batch_tokens,
        modes=tuple(csv_list(args.modes)),
        device=args.device,
        **kwargs,
    )
    out.print(format_attention_table(rows))
    if not args.no_record:
        from lra.core.environment import environment

        env = environment(args.device)
        _store([{"kind": "bench_attention", **env, **r} for r in rows], args.results)
    return 0


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: attention kernels, training steps")
    bsub = p.add_subparsers(dest="bench_cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="cuda", help="device (default cuda)")
    common.add_argument("--results", default=None, metavar="DIR", help="results store (default: leaderboard/results)")
    common.add_argument("--no-record", action="store_true", help="print only; store nothing")

    a = bsub.add_parser("attention", parents=[common], help="forward and forward+backward time, TFLOP/s, memory")
    a.add_argument("--attn", required=True, help="comma-separated backends, e.g. flash,sdpa_flash,naive")
    a.add_argument("--seq", default="1024,4096,16384", help="comma-separated lengths (4k style allowed)")
    a.add_argument("--head-dim", default="64", help="comma-separated head dims")
    a.add_argument("--heads", type=int, default=None, help="heads (default 8 at head dim 64, else 512/head_dim)")
    a.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    a.add_argument("--batch-tokens", type=int, default=131072, help="batch * seq (default 131072)")
    a.add_argument("--modes", default="fwd,fwd_bwd")
    a.add_argument("--layout", default=None, help="block-sparse layout for sparse backends, e.g. butterfly")
    a.set_defaults(func=cmd_bench_attention)

    t = bsub.add_parser("train", parents=[common], help="training steps/s, tokens/s, memory, speed-up vs naive")
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
        "--nproc", type=int, default=1, help="time data-parallel steps over N local processes (DDP; global batch kept)"
    )
    t.set_defaults(func=cmd_bench_train)


def add_numerics(sub) -> None:
    try:
        from lra.cli.numerics import add_numerics_parser
    except ImportError:
        return
    add_numerics_parser(sub)
