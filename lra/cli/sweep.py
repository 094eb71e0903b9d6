"""`lra sweep`: a grid of `lra run`s (tasks x backends x presets x seeds), each resumable in its own directory.

Also `lra run TASK --attn A --seeds 0,1,2`, the one-task sweep (`run_seeds`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from lra.cli.args import add_data_dir, add_device, add_overrides, add_time_limit
from lra.core.errors import ConfigError, RunSetupError
from lra.core.progress import console, out, quiet

EPILOG = """examples:
  lra sweep --tasks listops,text --attn flash,sdpa_flash --seeds 0-2 --preset fa-paper
  lra sweep --tasks listops --attn naive,flash --seeds 0-4 --per-gpu 4      four runs share each GPU
  lra sweep --tasks listops --attn flash --seeds 0-4 --executor slurm --partition gpu --time 12:00:00
  lra sweep --tasks listops --attn local,reformer --seeds 0-2 --preset fa-paper --skip-recorded leaderboard/results
      only the runs the curated records lack
  The same command again (or with --resume) skips finished runs and resumes unfinished ones.
"""


def add_parser(sub) -> None:
    """Add `sweep` to the `lra` sub-parsers `sub`."""
    p = sub.add_parser(
        "sweep",
        help="a grid of runs (tasks x backends x presets x seeds), resumable",
        description="Run every combination of --tasks, --attn, --preset and --seeds as an ordinary `lra run` in its "
        "own directory (ROOT/TASK/BACKEND/PRESET/sSEED). Finished runs are skipped and unfinished ones resumed, so "
        "a sweep stopped at any point continues with the same command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument("--tasks", required=True, help="comma-separated task names or config YAML paths")
    p.add_argument("--attn", required=True, help="comma-separated attention backends (see `lra list`)")
    p.add_argument("--seeds", default="0", help="seeds: a range 0-4, a list 0,1,2, or both 0-2,7 (default: 0)")
    p.add_argument("--preset", default="default", help="comma-separated presets; default: the YAML as written")
    add_overrides(p, example="train.steps=1000")
    p.add_argument("--root", default=None, metavar="DIR", help="where the runs go (default: RUNS_ROOT/sweeps)")
    p.add_argument("--per-gpu", type=int, default=1, metavar="K", help="runs at once on each GPU (CPU only: in all)")
    p.add_argument("--executor", choices=("local", "slurm", "submitit-local"), default="local",
                   help="local: here; slurm: SLURM jobs through submitit; submitit-local: the same jobs on this "
                   "machine (to try the cluster path)")  # fmt: skip
    p.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's)")
    p.add_argument("--time", default="24:00:00", help="time limit per job: minutes or H:MM:SS (default: 24:00:00)")
    p.add_argument("--gpus-per-node", type=int, default=1, metavar="G", help="GPUs per job (default: 1)")
    p.add_argument("--cpus-per-task", type=int, default=None, metavar="C", help="CPUs per job (default: SLURM's)")
    p.add_argument("--results", default=None, metavar="DIR", help="results store (default: the user's, $LRA_RESULTS)")
    p.add_argument("--skip-recorded", default=None, metavar="DIR",
                   help="leave out the cells that DIR already holds a record of (same task, backend and config hash, "
                   "seed included), wherever they ran: e.g. leaderboard/results, to run only what the leaderboard "
                   "still lacks")  # fmt: skip
    add_data_dir(p)
    add_device(p, help="cpu keeps the runs off the GPUs (default: each run on its GPU)")
    p.add_argument("--resume", action="store_true", help="accepted for symmetry with lra run: a sweep always resumes")
    add_time_limit(p)
    p.add_argument("--dry-run", action="store_true", help="show the grid and what each run needs, run nothing")
    p.add_argument("--runner", default="lra", help=argparse.SUPPRESS)  # python -m RUNNER run ... (tests)
    p.set_defaults(func=cmd_sweep, on_interrupt="; finished runs are kept (the same command resumes the rest)")


def cmd_sweep(args: argparse.Namespace) -> int:
    """Build the grid from the options (bad cells fail before anything runs), then run what is left of it."""
    from lra.sweep.grid import build_grid, default_root, parse_names, parse_seeds

    root = Path(args.root).expanduser().resolve() if args.root else default_root()
    runs = build_grid(
        tasks=parse_names(args.tasks, "tasks"),
        attns=parse_names(args.attn, "attn"),
        seeds=parse_seeds(args.seeds),
        presets=parse_names(args.preset, "preset"),
        overrides=list(args.overrides),
        root=root,
    )
    if args.skip_recorded:
        runs = _leave_out_recorded(runs, Path(args.skip_recorded).expanduser())
        if not runs:
            return 0
    return execute(runs, args, root)


def _leave_out_recorded(runs, store: Path):
    """The grid less the cells `store` holds a record of, saying which were left out."""
    from lra.sweep.grid import leave_out_recorded, recorded_cells

    todo, held = leave_out_recorded(runs, recorded_cells(store))
    if held:
        names = ", ".join(run.name for run in held)
        console.print(f"left out {len(held)} of {len(runs)} runs, recorded in {store}: {names}", highlight=False,
                      markup=False, soft_wrap=True)  # fmt: skip
    if not todo:
        console.print(f"[bold green]done[/]: {store} holds a record of every run of this grid", highlight=False,
                      soft_wrap=True)  # fmt: skip
    return todo


def run_seeds(args: argparse.Namespace) -> int:
    """`lra run TASK --attn A --seeds S`: the one-task sweep, into RUNS_ROOT/sweeps (or --runs-root/sweeps)."""
    from lra.sweep.grid import DEFAULT, build_grid, default_root, parse_seeds

    given = {"--seed": args.seed is not None, "--out": args.out, "--nproc": args.nproc > 1}
    clash = [flag for flag, value in {**given, "--no-record": args.no_record}.items() if value]
    if clash:
        raise ConfigError(f"--seeds runs one directory per seed, each recorded: leave out {', '.join(clash)}")
    root = Path(args.runs_root).expanduser().resolve() / "sweeps" if args.runs_root else default_root()
    runs = build_grid(
        tasks=[args.task], attns=[args.attn], seeds=parse_seeds(args.seeds), presets=[args.preset or DEFAULT],
        overrides=list(args.overrides), root=root,
    )  # fmt: skip
    defaults = {"per_gpu": 1, "executor": "local", "dry_run": False, "runner": "lra"}
    return execute(runs, argparse.Namespace(**{**defaults, **vars(args)}), root)


def execute(runs, args: argparse.Namespace, root: Path) -> int:
    """Check the grid against what is on disk, run what is left, show the table; 0 when every run is done."""
    from lra.results.store import results_dir
    from lra.sweep.board import Board
    from lra.sweep.local_pool import LaunchOptions

    if args.per_gpu < 1:
        raise ConfigError(f"--per-gpu must be at least 1, got {args.per_gpu}")
    from lra.train.budget import TimeBudget, parse_duration

    results = Path(args.results).expanduser().resolve() if args.results else results_dir().resolve()
    limit = getattr(args, "time_limit", None)
    budget = None if limit is None else TimeBudget(parse_duration(limit))
    if budget is not None and args.executor != "local":
        raise ConfigError("--time-limit works with the local executor (a cluster job has its own --time)")
    options = LaunchOptions(results=results, data_dir=args.data_dir, device=args.device, runner=args.runner,
                            budget=budget)  # fmt: skip
    board = Board(runs, title=f"lra sweep: {len(runs)} runs")
    _check(runs, board, results, local=args.executor == "local", device=args.device)
    if args.dry_run:
        board.refresh()
        out.print(board.render())
        return 0
    if args.executor == "local":
        _run_local(runs, args, options, board)
    else:
        _run_cluster(runs, args, options, board, folder=root / "submitit")
    board.refresh()
    out.print(board.render())
    return _report(runs, board)


def _check(runs, board, results: Path, *, local: bool, device: str | None) -> None:
    """Every run's state now (a directory of another config fails here) and, for the local executor, whether its
    backend runs on this machine's device."""
    from lra.sweep.grid import recorded_run_dirs, run_state

    recorded = recorded_run_dirs(results)
    problems = []
    for run in runs:
        try:
            state = run_state(run, recorded)
        except RunSetupError as e:
            problems.append(str(e))
            continue
        board.set(run, "done" if state == "done" else f"pending ({state})", "")
    if local:
        problems += _device_problems(runs, device)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise RunSetupError("; ".join(problems[:5]) + more)


def _device_problems(runs, device: str | None) -> list[str]:
    from lra.sweep.grid import DEFAULT
    from lra.sweep.local_pool import visible_gpus
    from lra.train.config import load_config
    from lra.train.gate import gate

    dev = "cpu" if device == "cpu" or not visible_gpus() else "cuda"
    problems, seen = [], set()
    for run in runs:
        key = (run.task, run.preset, run.attn)
        if key in seen:
            continue
        seen.add(key)
        config = load_config(
            run.task, None if run.preset == DEFAULT else run.preset, list(run.overrides), backend=run.attn
        )
        try:
            gate(config, run.attn, dev)  # each run's own gate, asked before any of them starts
        except (ConfigError, RunSetupError) as e:
            problems.append(f"{run.label} / {run.attn}: {e}")
    return problems


@contextlib.contextmanager
def _live(board) -> Iterator[Callable[[], None]]:
    """The live table on the console while the block runs; yields the tick that re-reads and redraws it. Output
    that is not a terminal (a log file) gets plain lines instead: state changes, and each running run's progress
    once a minute."""
    from rich.live import Live

    from lra.sweep.board import LineLog

    if quiet():
        yield board.refresh
        return
    if not console.is_terminal:
        log = LineLog(board)

        def write() -> None:
            board.refresh()
            for line in log.lines():
                console.print(line, highlight=False, markup=False, soft_wrap=True)

        yield write
        return
    with Live(board.render(), console=console, refresh_per_second=2, transient=True) as live:

        def tick() -> None:
            board.refresh()
            live.update(board.render())

        yield tick


def _run_local(runs, args, options, board) -> None:
    from lra.sweep.local_pool import run_local

    todo = [run for run in runs if board.rows[run.name].state != "done"]
    with _live(board) as tick:
        run_local(todo, per_gpu=args.per_gpu, options=options, on_status=board.set, on_tick=tick)


def _run_cluster(runs, args, options, board, *, folder: Path) -> None:
    if importlib.util.find_spec("submitit") is None:
        raise ConfigError(f"--executor {args.executor} needs submitit: pip install submitit (or the [slurm] extra)")
    from lra.sweep import cluster

    settings = cluster.ClusterOptions(
        executor=args.executor, partition=args.partition, time_min=cluster.parse_minutes(args.time),
        gpus_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task,
    )  # fmt: skip
    todo = [run for run in runs if board.rows[run.name].state != "done"]
    if not todo:
        return
    jobs = cluster.submit(todo, per_gpu=args.per_gpu, options=options, cluster=settings, folder=folder)
    console.print(f"submitted {len(jobs)} job(s) for {len(todo)} runs; submitit files in {folder}", highlight=False)
    with _live(board) as tick:
        cluster.wait(jobs, on_status=board.set, on_tick=tick)


def _report(runs, board) -> int:
    """Name the runs that did not finish (with their logs' last lines) and those left to another process; 0 when
    every run is done or running elsewhere (a second sweep of the same grid is not a failure)."""
    skipped = [run for run in runs if board.rows[run.name].state == "skipped"]
    stopped = [run for run in runs if board.rows[run.name].state == "stopped"]
    unfinished = [run for run in runs if board.rows[run.name].state not in ("done", "skipped", "stopped")]
    for run in skipped:
        console.print(f"[yellow]skipped[/] {run.name}: {board.rows[run.name].where}", highlight=False)
    for run in unfinished:
        row = board.rows[run.name]
        console.print(f"[bold red]{row.state}[/] {run.name} ({row.where}); log: {run.log}", highlight=False)
        if row.state == "failed" and run.log.is_file():
            with open(run.log, encoding="utf-8", errors="replace") as f:
                for line in deque(f, maxlen=5):
                    console.print(f"    {line.rstrip()}", highlight=False, markup=False)
    if unfinished:
        console.print(f"{len(unfinished)} of {len(runs)} runs did not finish; the same command continues the sweep")
        return 1
    if stopped:
        console.print(
            f"[yellow]time limit[/]: {len(runs) - len(stopped)} of {len(runs)} runs done, {len(stopped)} "
            "stopped with their state saved; the same command continues the sweep",
            highlight=False,
        )
        return 0
    if skipped:
        done = f"{len(runs) - len(skipped)} of {len(runs)} runs; {len(skipped)} running in another process (the same "
        done += "command later checks them)"
    else:
        done = f"all {len(runs)} runs"
    console.print(f"[bold green]done[/]: {done}", highlight=False)
    return 0
