"""`lra list`: the tasks with their presets, and every attention backend with its capabilities, notes and whether
it runs on this machine. `lra list settings`: every declared setting with its type, range, default and doc."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    """Add `list` to the `lra` sub-parsers `sub`."""
    p = sub.add_parser("list", help="tasks, attention backends with capabilities, presets, what runs here; settings")
    p.add_argument(
        "what", nargs="?", choices=("settings",), default=None,
        help="settings: every model and train setting with its type, range, default and doc",
    )  # fmt: skip
    p.set_defaults(func=cmd_list)


def settings_rows() -> list[tuple[str, str, str, str]]:
    """(key, expected values, default, doc) of every declared setting, in declaration order."""
    import json

    from lra.train.settings import declared, sections, thaw

    rows = []
    for section_name, section in sections().items():
        for name, f in declared(section).items():
            default = json.dumps(thaw(f.default))
            doc = f.metadata["doc"] + (" (speed only: outside the config hash)" if f.metadata["speed"] else "")
            rows.append((f"{section_name}.{name}", f.metadata["rule"].describe(), default, doc))
    return rows


def settings_table():
    """`lra list settings`: one row per declared setting (lra.train.settings), set with --set KEY=VALUE."""
    from rich.table import Table

    table = Table(
        title="settings (--set KEY=VALUE; data.* are each task's, attention.NAME.* each backend's: see `lra list`)"
    )
    table.add_column("setting", no_wrap=True)
    for col in ("values", "default", "what"):
        table.add_column(col, overflow="fold")
    for row in settings_rows():
        table.add_row(*row)
    return table


def tasks_table():
    """One row per registered task: classes, description, presets."""
    from rich.table import Table

    from lra.train.config import available_configs, presets_of
    from tasks import TASKS

    table = Table(title="tasks")
    table.add_column("task", no_wrap=True)
    for col in ("classes", "description", "presets"):
        table.add_column(col, overflow="fold")
    configs = set(available_configs())
    for name, cls in TASKS.items():
        presets = ", ".join(presets_of(name)) if name in configs else "(no config)"
        description = cls.description or (cls.__doc__ or "").strip().split("\n")[0]
        table.add_row(name, str(cls.num_classes), description, presets or "-")
    return table


def backends_table(device: str):
    """One row per registered backend: capability summary, notes, and whether (or why not) it runs on `device`."""
    from rich.table import Table

    from attention_impls import BACKENDS, why_cannot_run

    table = Table(title=f"attention backends (runs here = on {device})")
    table.add_column("backend", no_wrap=True)
    for col in ("capabilities", "notes", f"runs here ({device})"):
        table.add_column(col, overflow="fold")
    for name, cls in BACKENDS.items():
        reason = why_cannot_run(name, device)
        table.add_row(
            name,
            cls.capabilities.summary(),
            cls.capabilities.notes or "-",
            "yes" if reason is None else f"no: {reason}",
        )
    return table


def cmd_list(args: argparse.Namespace) -> int:
    import torch

    from lra.core.progress import out

    if args.what == "settings":
        out.print(settings_table())
        return 0
    out.print(tasks_table())
    out.print(backends_table("cuda" if torch.cuda.is_available() else "cpu"))
    return 0
