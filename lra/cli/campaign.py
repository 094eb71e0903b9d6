"""`lra campaign`: carry a curriculum (Pathfinder-32 -> Path-64 -> Path-X or Path-256) one session further."""

from __future__ import annotations

import argparse
from pathlib import Path

from lra.cli.args import add_data_dir, add_device, add_overrides, add_time_limit
from lra.core.errors import ConfigError

EPILOG = """examples:
  lra campaign path-x --attn block_sparse_flash --state campaigns/path-x-bsf --time-limit 9m
  lra campaign path-256 --attn block_sparse_flash --state campaigns/path-256-bsf --from campaigns/path-x-bsf
  lra campaign path-x --attn flash --state campaigns/path-x-flash-s1 --seed 1 --set path-x:train.lr=5e-4
  The same command in the next session continues where the state folder says the campaign stands.
"""


def add_parser(sub) -> None:
    """Add `campaign` to the `lra` sub-parsers `sub`."""
    p = sub.add_parser(
        "campaign",
        help="a curriculum of runs carried across sessions (Path-X, Path-256 on a budget)",
        description="Train the stages that lead to TARGET (its preset's train.init_from chain: Pathfinder-32 -> "
        "Path-64 -> TARGET), each from the last one's best checkpoint with positions upsampled, in the state folder "
        "--state: find the current stage, draw its data when absent, resume or start it, stop cleanly before "
        "--time-limit. The state folder then holds what to commit for the next session (README: Path-X on a budget).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    p.add_argument("target", help="the last stage's task: path-x, path-256 or path-64")
    p.add_argument("--attn", required=True, metavar="NAME", help="attention backend (see `lra list`)")
    p.add_argument(
        "--state", required=True, metavar="DIR", help="the campaign's state folder (committed between sessions)"
    )
    p.add_argument("--preset", default="curriculum", help="every stage's preset (default: curriculum)")
    p.add_argument("--seed", type=int, default=0, help="training seed of every stage (default: 0)")
    add_overrides(p, example="train.lr=5e-4 (every stage) or --set path-x:train.steps=20000 (one stage)")
    add_time_limit(p)
    p.add_argument("--from", dest="from_state", default=None, metavar="DIR",
                   help="a new campaign takes the finished stages it shares with the campaign in DIR")  # fmt: skip
    p.add_argument("--data-only", action="store_true",
                   help="draw the current stage's data when absent, then stop (a session's first command)")  # fmt: skip
    p.add_argument("--workers", type=int, default=None, help="processes drawing data (default: every core)")
    p.add_argument("--no-prefetch", action="store_true",
                   help="draw each stage's data at its start, not the next stage's while this one trains")  # fmt: skip
    p.add_argument("--past-chance", action="store_true",
                   help="go on from a stage that ended at chance (by default the campaign stops there)")  # fmt: skip
    add_data_dir(p)
    p.add_argument("--results", default=None, metavar="DIR",
                   help="results store of the finished stages' records (default: $LRA_RESULTS or yours)")  # fmt: skip
    p.add_argument("--no-record", action="store_true", help="store no result records")
    add_device(p)
    p.add_argument("--dry-run", action="store_true", help="show the stages and where the campaign stands")
    p.set_defaults(
        func=cmd_campaign, on_interrupt="; the state folder keeps what was last saved (the same command resumes)"
    )


def cmd_campaign(args: argparse.Namespace) -> int:
    """One session of the campaign (or, with --dry-run, its plan)."""
    from lra.campaign.drive import CampaignOptions, run_campaign
    from lra.train.budget import TimeBudget, parse_duration

    budget = None if args.time_limit is None else TimeBudget(parse_duration(args.time_limit))  # counts from here
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    opts = CampaignOptions(
        target=args.target, attn=args.attn, state=Path(args.state), preset=args.preset, seed=args.seed,
        overrides=list(args.overrides), data_dir=args.data_dir, results=args.results, device=args.device,
        workers=args.workers, record=not args.no_record, data_only=args.data_only, prefetch=not args.no_prefetch,
        past_chance=args.past_chance,
        from_state=Path(args.from_state) if args.from_state else None,
    )  # fmt: skip
    if args.dry_run:
        return show_plan(opts)
    from lra.core.signals import stop_on_terminate

    with stop_on_terminate():  # SIGTERM / SIGUSR1: the stage in training stops at its next logging point, saved
        run_campaign(opts, budget)
    return 0


def show_plan(opts) -> int:
    """The stages, their lengths and where each stands in the state folder."""
    from lra.campaign.drive import changed_hash, shared_stages
    from lra.campaign.ledger import read_ledger
    from lra.campaign.plan import plan_stages
    from lra.core.progress import out
    from lra.train.checkpoint import load_checkpoint
    from lra.train.rundir import RunDir

    stages = plan_stages(
        opts.target, attn=opts.attn, preset=opts.preset, seed=opts.seed, overrides=list(opts.overrides)
    )
    ledger = read_ledger(opts.state) if opts.state.is_dir() else None
    taken = {}  # a new state's stages that --from would take: what they are there
    if ledger is None and opts.from_state is not None:
        other, shared = shared_stages(stages, opts.from_state)
        taken = {s.task: other["stages"][s.task] for s in shared}
    for s in stages:
        entry = (ledger or {}).get("stages", {}).get(s.task) or taken.get(s.task, {})
        status = entry.get("status", "pending")
        if s.task in taken:
            status += f" in {opts.from_state} (taken from there at the start)"
        changed = changed_hash(RunDir(opts.state / s.task), s)
        if changed is not None:
            status += f" with other settings (config hash {changed[0]}, now {changed[1]}: a new --state)"
        steps = f"{entry.get('steps', 0)}/{s.steps} steps"
        run = RunDir(opts.state / s.task)
        resume_at = entry.get("steps", 0)
        if run.last.is_file() and not run.finished:  # the ledger's count lags when a machine was lost mid-stage
            resume_at = load_checkpoint(run.last)["step"]
            steps += f", last.pt at step {resume_at} (it resumes there)"
        start = f"from {s.init_from}" if s.init_from else "from scratch"
        out.print(f"{s.index}. {s.task} ({start}): {status}, {steps}", highlight=False)
        rest = rest_of_stage(ledger, s.task, resume_at, s.steps) if status == "running" else None
        if rest:
            out.print(f"   {rest}", highlight=False)
    if ledger:
        out.print(f"{ledger['totals'].get('device_hours', 0):.2f} device-hours over "
                  f"{ledger['totals'].get('sessions', 0)} sessions", highlight=False)  # fmt: skip
    return 0


def rest_of_stage(ledger: dict | None, task: str, resume_at: int, total: int) -> str | None:
    """What the rest of a running stage will cost, priced as its sessions went so far; None before its first step."""
    from lra.campaign.ledger import stage_pace

    pace = stage_pace(ledger, task) if ledger and resume_at < total else None
    if pace is None:
        return None
    rate, besides = pace
    left = total - resume_at
    minutes = (left / rate + besides) / 60
    return (
        f"about {minutes:.1f} device-minutes to its end: {left:,} steps at {rate:.1f} training steps/s and "
        f"{besides:.0f} s a session besides, as its sessions went (data drawing not counted)"
    )
