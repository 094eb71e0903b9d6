"""`lra data prepare|info|export|compare|markers`: build or import task data into the cache, show what is there, export
it, compare generated Pathfinder images with the original generator's (lra/cli/data_compare.py), measure what their
markers alone tell (lra/cli/data_markers.py)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from lra.cli import data_compare, data_markers
from lra.cli.args import add_data_dir, add_overrides
from lra.core.errors import ConfigError, WriteError, write_reason
from lra.core.progress import console, out

INFO_COLUMNS = ("task", "source", "where", "splits", "size", "ready", "to prepare")
SPLIT_ORDER = ("train", "val", "test")


def add_parser(sub) -> None:
    """Add `data` with its `prepare`, `info`, `export`, `compare` and `markers` sub-commands to the `lra` sub-parsers
    `sub`."""
    p = sub.add_parser("data", help="build, import, inspect or export task data")
    dsub = p.add_subparsers(dest="data_cmd", required=True, metavar="{prepare,info,export,compare,markers}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--preset", default=None, help="use a preset's data settings (e.g. tiny)")
    add_overrides(common, example="data.num_train=1000")
    add_data_dir(common)

    pr = dsub.add_parser(
        "prepare", parents=[common], help="generate (synthetic tasks) or import (real data) into the cache"
    )
    pr.add_argument("task")
    pr.add_argument("--from", dest="source", default=None, metavar="PATH", help="archive or folder to import from")
    pr.add_argument("--workers", type=int, default=None, help="worker processes (default: all cores)")
    pr.add_argument(
        "--targets-only", action="store_true",
        help="generated Pathfinder tasks: draw only the target pairs (the costly part of each image, ~210 bytes an "
        "image), to carry to a machine that then draws the images quickly",
    )  # fmt: skip
    pr.set_defaults(
        func=cmd_prepare,
        on_interrupt="; splits already drawn are kept, a half-drawn one is not (the same command goes on)",
    )

    info = dsub.add_parser("info", parents=[common], help="what is cached where, how big, and how to prepare it")
    info.add_argument("task", nargs="?", help="one task (default: every task)")
    info.add_argument("--json", action="store_true", help="print the raw information as JSON")
    info.add_argument("--wide", action="store_true", help="one table with every column (default: what fits)")
    info.set_defaults(func=cmd_info)

    ex = dsub.add_parser("export", parents=[common], help="write generated data in LRA's release format")
    ex.add_argument("task")
    ex.add_argument("dir")
    ex.set_defaults(func=cmd_export)
    data_compare.add_parser(dsub)
    data_markers.add_parser(dsub, common)


def task_of(name: str, args: argparse.Namespace):
    """The task `name` with the (preset's, overridden) data settings of its config."""
    from lra.train.config import load_config
    from tasks import build_task

    cfg = load_config(name, args.preset, args.overrides)
    return build_task(cfg.task, data_dir=args.data_dir, **cfg.data)


def cmd_prepare(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1 (leave it out to use every core), got {args.workers}")
    task = task_of(args.task, args)
    workers = args.workers or os.cpu_count() or 1
    if args.targets_only:
        if not hasattr(task, "prepare_targets"):
            raise ConfigError(
                f"--targets-only: {task.name} is not a generated Pathfinder task (only those have target pairs)"
            )
        if args.source is not None:
            raise ConfigError("--targets-only draws target pairs; --from imports a release: use one of the two")
        task.prepare_targets(workers=workers)
        console.print(f"[green]prepared[/] {task.name}'s target pairs in {task.data_dir}", highlight=False)
        return 0
    task.prepare(source=args.source, workers=workers)
    console.print(f"[green]prepared[/] {task.name} in {task.data_dir}", highlight=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    task = task_of(args.task, args)
    if not hasattr(task, "export"):
        from tasks import TASKS

        have = ", ".join(name for name, cls in TASKS.items() if hasattr(cls, "export"))
        raise ConfigError(f"lra data export: task {task.name!r} has no export (tasks that have one: {have})")
    try:
        task.export(args.dir)
    except OSError as e:
        reason = write_reason(e)
        if reason is None:
            raise
        raise WriteError(
            f"lra data export: cannot write {e.filename or args.dir}: {reason}; choose a writable DIR"
        ) from None
    console.print(f"[green]exported[/] {task.name} to {args.dir}", highlight=False)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from tasks import TASKS

    names = [args.task] if args.task else TASKS.names()
    infos = [task_of(name, args).info() for name in names]
    if args.json:
        out.print_json(json.dumps(infos, default=str))
        return 0
    from rich.filesize import decimal
    from rich.measure import Measurement

    from lra.core.tables import print_table

    full = info_table(infos)
    if args.wide or Measurement.get(out, out.options.update_width(1 << 16), full).maximum <= out.width:
        print_table(out, full, wide=args.wide)
        return 0
    for info in infos:  # a narrow terminal: one block per task, paths and commands on lines of their own
        state = ["ready" if info["ready"] else "not prepared"] + ([decimal(info["bytes"])] if info["bytes"] else [])
        state += [_splits_text(info["splits"])] if info["splits"] else []
        out.print(f"[bold]{info['task']}[/]: {'; '.join(state)}", highlight=False)
        for label, key in (("source", "source"), ("where", "where"), ("prepare", "prepare")):
            if info[key]:
                out.print(f"  {label + ':':<8} {info[key]}", highlight=False, markup=False, soft_wrap=True)
    return 0


def _splits_text(splits: dict[str, int]) -> str:
    """'train 3,000, val 300, test 300': the usual splits first, in that order."""
    rank = {name: i for i, name in enumerate(SPLIT_ORDER)}
    order = sorted(splits, key=lambda name: (rank.get(name, len(rank)), name))
    return ", ".join(f"{name} {splits[name]:,}" for name in order) or "-"


def info_table(infos: list[dict[str, Any]]):
    """A rich table of tasks' `info()` (fields task, source, where, splits, bytes, ready, prepare); `lra data info`
    shows it where it fits (or with --wide), else one block of lines per task."""
    from rich.filesize import decimal
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="task data")
    columns = INFO_COLUMNS
    for col in columns:
        table.add_column(col, overflow="fold")
    for info in infos:
        cells = {
            "task": info["task"],
            "source": escape(str(info["source"] or "-")),
            "where": escape(str(info["where"] or "-")),
            "splits": _splits_text(info["splits"] or {}),
            "size": decimal(info["bytes"]) if info["bytes"] else "-",
            "ready": "[green]yes[/]" if info["ready"] else "[yellow]no[/]",
            "to prepare": escape(info["prepare"] or "-"),
        }
        table.add_row(*(cells[c] for c in columns))
    return table
