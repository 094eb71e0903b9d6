"""`lra run`: train and test one task with one attention backend, then store the result record."""

from __future__ import annotations

import argparse

from lra.cli.args import add_data_dir, add_device, add_overrides, add_results, add_time_limit, check_nproc
from lra.core.progress import console

EPILOG = """examples:
  lra run listops --attn naive --preset tiny      a CPU-sized run in a couple of minutes
  lra run listops --attn flash                    the LRA config on a GPU
  lra run path-x --attn block_sparse_flash --set train.steps=1000
  lra run listops --attn flash --results leaderboard/results      add the record to the curated set
every setting of --set, with its type, range, default and doc: lra list settings
"""


def add_parser(sub) -> None:
    """Add `run` to the `lra` sub-parsers `sub`."""
    p = sub.add_parser(
        "run",
        help="train and test one task with one attention backend",
        description="Train TASK with attention backend NAME on the task's config (configs/TASK.yaml), evaluate on "
        "validation periodically, test the best checkpoint, and store a result record in the results store.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument("task", help="task name (see `lra list`) or a config YAML path")
    p.add_argument("--attn", required=True, metavar="NAME", help="attention backend (see `lra list`)")
    p.add_argument("--preset", default=None, help="config preset, e.g. tiny (default: the YAML as written)")
    add_overrides(p, example="train.lr=3e-4 --set model.layers=2")
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted run (the newest unfinished one, or --out)"
    )
    p.add_argument(
        "--out", default=None, metavar="DIR", help="run directory (default: RUNS_ROOT/TASK/NAME-PRESET-sSEED-TIME)"
    )
    p.add_argument(
        "--runs-root",
        default=None,
        metavar="DIR",
        help="where default run directories go (default: $LRA_RUNS or ~/.local/share/lra/runs)",
    )
    add_device(p)
    p.add_argument("--seed", type=int, default=None, help="training seed (same as --set train.seed=S)")
    p.add_argument("--seeds", default=None, help="several seeds, e.g. 0,1,2 or 0-4: a one-task `lra sweep`")
    add_data_dir(p)
    add_results(p)
    p.add_argument("--nproc", type=int, default=1, help="train with N local processes (torch.distributed, DDP)")
    add_time_limit(p)
    p.add_argument("--stop-after", type=int, default=None, help=argparse.SUPPRESS)  # simulate a kill (tests)
    p.set_defaults(
        func=cmd_run, on_interrupt="; checkpoints written so far are intact (lra run ... --resume continues)"
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Train, then (on rank 0, unless --no-record) store the summary as a record and say where it went."""
    from lra.train.budget import TimeBudget, parse_duration
    from lra.train.config import load_config

    budget = None if args.time_limit is None else TimeBudget(parse_duration(args.time_limit))  # counts from here
    if args.seeds is not None:
        from lra.cli.sweep import run_seeds

        return run_seeds(args)
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"train.seed={args.seed}")
    # bad settings (the backend's own preset settings too) fail here, before any process starts
    config = load_config(args.task, args.preset, overrides, backend=args.attn)
    check_nproc(args.nproc)
    if args.nproc > 1:
        from lra.train.device import resolve_device
        from lra.train.gate import gate
        from lra.train.launch import launch_local

        gate(config, args.attn, resolve_device(args.device), world_size=args.nproc, data_dir=args.data_dir)  # once
        return launch_local(args.nproc, args.argv)  # each worker's train() passes the same gate
    from lra.core.signals import stop_on_terminate
    from lra.train import distributed as dist
    from lra.train.run import train

    dist.init_from_env(args.device)
    try:
        with stop_on_terminate():  # SIGTERM / SIGUSR1: stop at the next logging point with the full state saved
            summary = train(
                config,
                args.attn,
                out_dir=args.out,
                runs_root=args.runs_root,
                device=args.device,
                resume=args.resume,
                data_dir=args.data_dir,
                stop_after=args.stop_after,
                time_budget=budget,
            )
        main_rank = dist.is_main()
    finally:
        dist.shutdown()
    if main_rank and ("time_limit_s" in summary or "stopped_by" in summary):
        console.print(f"resume with: {resume_command(args.argv, summary['run_dir'])}", highlight=False, soft_wrap=True)
    if main_rank and "stopped_at" not in summary and not args.no_record:
        store_summary(summary, args.results)
    return 0


def resume_command(argv: list[str], run_dir: str) -> str:
    """The `lra run` line that continues a run stopped on time: the same arguments with --resume and --out."""
    import shlex

    words = ["lra", *argv]
    if "--resume" not in argv:
        words.append("--resume")
    if "--out" not in argv and not any(a.startswith("--out=") for a in argv):
        words += ["--out", run_dir]
    return shlex.join(words)


def store_summary(summary: dict, results: str | None) -> None:
    """Store the run's record; a store that cannot be written is a one-line WriteError saying that the record is
    kept in the run directory (summary.json) and how to store it later."""
    from lra.core.errors import WriteError
    from lra.results.store import save_record

    try:
        path = save_record(summary, results)
    except WriteError as e:
        later = f"lra results store {summary['run_dir']}" + (f" --results {results}" if results else "")
        raise WriteError(f"{e}; the record is kept in {summary['run_dir']}/summary.json: run `{later}` once the "
                         "store is writable") from e  # fmt: skip
    console.print(f"record: {path}", highlight=False, soft_wrap=True)
