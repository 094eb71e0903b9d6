"""The `lra` command line: run, list, leaderboard, data, bench, numerics."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lra.core.progress import console, out

EPILOG = """examples:
  lra run listops --attn naive --preset tiny      a CPU-sized run in a couple of minutes
  lra run listops --attn flash                    the LRA config on a GPU
  lra run path-x --attn block_sparse_flash --set train.steps=1000
  lra list                                        tasks, backends, presets, what runs here
  lra leaderboard                                 regenerate leaderboard/LEADERBOARD.md
"""


def _add_run(sub) -> None:
    p = sub.add_parser(
        "run",
        help="train and test one task with one attention backend",
        description="Train TASK with attention backend NAME on the task's config (configs/TASK.yaml), evaluate on "
        "validation periodically, test the best checkpoint, and store a result record.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument("task", help="task name (see `lra list`) or a config YAML path")
    p.add_argument("--attn", required=True, metavar="NAME", help="attention backend (see `lra list`)")
    p.add_argument("--preset", default=None, help="config preset, e.g. tiny or full (default: the YAML as written)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set train.lr=3e-4 --set model.layers=2 (repeatable)",
    )
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted run (the newest unfinished one, or --out)"
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="run directory (default: runs/TASK/NAME-PRESET-sSEED-TIME)"
    )
    p.add_argument(
        "--runs-root", default="runs", metavar="DIR", help="where default run directories go (default: runs)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--seed", type=int, default=None, help="training seed (same as --set train.seed=S)")
    p.add_argument("--data-dir", default=None, help="task data cache (default: $LRA_DATA or ~/.cache/lra/data)")
    p.add_argument("--results", default=None, metavar="DIR", help="results store (default: leaderboard/results)")
    p.add_argument("--nproc", type=int, default=1, help="train with N local processes (torch.distributed, DDP)")
    p.add_argument("--no-record", action="store_true", help="do not write a result record")
    p.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)  # simulate a kill (tests)


def cmd_run(args) -> int:
    from lra.train.config import load_config

    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"train.seed={args.seed}")
    config = load_config(args.task, args.preset, overrides)
    if args.nproc > 1:
        from lra.train.launch import launch_local

        return launch_local(args.nproc, sys.argv[1:])
    from lra.train import distributed as dist
    from lra.train.run import train

    dist.init_from_env(args.device)
    try:
        train(
            config,
            args.attn,
            out_dir=args.out,
            runs_root=args.runs_root,
            device=args.device,
            resume=args.resume,
            data_dir=args.data_dir,
            results_store=args.results,
            stop_after=args.stop_after,
            save_result=not args.no_record,
        )
    finally:
        dist.shutdown()
    return 0


def cmd_list(args) -> int:
    import torch
    from rich.table import Table

    from attention_impls import BACKENDS, why_cannot_run
    from lra.train.config import available_configs, presets_of
    from tasks import TASKS

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = Table(title="tasks")
    for col in ("task", "classes", "description", "presets"):
        t.add_column(col)
    configs = set(available_configs())
    for name, cls in TASKS.items():
        presets = ", ".join(presets_of(name)) if name in configs else "(no config)"
        t.add_row(name, str(cls.num_classes), cls.description or (cls.__doc__ or "").strip().split("\n")[0], presets)
    out.print(t)
    b = Table(title=f"attention backends (runs here = on {device})")
    for col in ("backend", "capabilities", f"runs here ({device})"):
        b.add_column(col)
    for name, cls in BACKENDS.items():
        reason = why_cannot_run(name, device)
        b.add_row(name, cls.capabilities.summary(), "yes" if reason is None else f"no: {reason}")
    out.print(b)
    return 0


def cmd_leaderboard(args) -> int:
    from lra.results.leaderboard import write_leaderboard

    for path in write_leaderboard(args.results, args.out, args.format, plots=not args.no_plots):
        console.print(f"wrote {path}")
    return 0


def cmd_data(args) -> int:
    from lra.train.config import load_config
    from tasks import TASKS, build_task

    if args.data_cmd == "info":
        import json

        names = [args.task] if args.task else TASKS.names()
        for name in names:
            cfg = load_config(name, args.preset, args.overrides)
            task = build_task(cfg["task"], data_dir=args.data_dir, **cfg["data"])
            out.print_json(json.dumps(task.info(), default=str))
        return 0
    cfg = load_config(args.task, args.preset, args.overrides)
    task = build_task(cfg["task"], data_dir=args.data_dir, **cfg["data"])
    if args.data_cmd == "prepare":
        task.prepare(source=args.source, workers=args.workers or os.cpu_count() or 1)
        console.print(f"[green]prepared[/] {cfg['task']} in {task.data_dir}")
    elif args.data_cmd == "export":
        if not hasattr(task, "export"):
            raise SystemExit(f"lra data export: task {cfg['task']!r} has no export (only generated tasks do)")
        task.export(Path(args.dir))
        console.print(f"[green]exported[/] {cfg['task']} to {args.dir}")
    return 0


def _add_data(sub) -> None:
    p = sub.add_parser("data", help="build, import, inspect or export task data")
    dsub = p.add_subparsers(dest="data_cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--preset", default=None, help="use a preset's data settings (e.g. tiny)")
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    common.add_argument("--data-dir", default=None, help="data cache (default: $LRA_DATA or ~/.cache/lra/data)")
    pr = dsub.add_parser(
        "prepare", parents=[common], help="generate (synthetic tasks) or import (real data) into the cache"
    )
    pr.add_argument("task")
    pr.add_argument("--from", dest="source", default=None, metavar="PATH", help="archive or folder to import from")
    pr.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    info = dsub.add_parser("info", parents=[common], help="what is cached where, and how big")
    info.add_argument("task", nargs="?")
    ex = dsub.add_parser("export", parents=[common], help="write generated data in LRA's release format")
    ex.add_argument("task")
    ex.add_argument("dir")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lra",
        description="Long Range Arena benchmark suite: exact and approximate attention on long sequences.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    _add_run(sub)
    sub.add_parser("list", help="tasks, attention backends with capabilities, presets")
    lb = sub.add_parser("leaderboard", help="regenerate the leaderboard tables (and plots) from stored results")
    lb.add_argument("--results", default=None, metavar="DIR", help="results store (default: leaderboard/results)")
    lb.add_argument("--out", default=None, metavar="DIR", help="where to write (default: the store's parent)")
    lb.add_argument("--format", choices=("md", "html"), default="md")
    lb.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    _add_data(sub)
    from lra.cli.bench import add_bench, add_numerics

    add_bench(sub)
    add_numerics(sub)
    args = parser.parse_args(argv)
    handlers = {"run": cmd_run, "list": cmd_list, "leaderboard": cmd_leaderboard, "data": cmd_data}
    try:
        if args.cmd in handlers:
            return handlers[args.cmd](args)
        return args.func(args)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]; checkpoints written so far are intact (lra run ... --resume continues)")
        return 130
    except Exception as e:  # one clear line for the errors users cause; tracebacks for the rest
        if _is_user_error(e) and not os.environ.get("LRA_DEBUG"):
            console.print(f"[bold red]error:[/] {e}")
            return 2
        raise


def _is_user_error(e: Exception) -> bool:
    from lra.core.errors import ConfigError, DataCorruptError, DataMissingError, UnknownNameError
    from lra.train.run import NonFiniteLossError, RunSetupError

    return isinstance(
        e,
        (
            ConfigError,
            UnknownNameError,
            RunSetupError,
            NonFiniteLossError,
            DataMissingError,
            DataCorruptError,
            ValueError,
        ),
    )
