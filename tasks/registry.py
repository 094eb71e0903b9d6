"""Tasks by name: `TASKS`, `register_task` and `build_task`. The interface every task implements is
`tasks.base.Task`."""

from __future__ import annotations

import os
from typing import Any

from lra.core.registry import Registry
from tasks.base import Task

TASKS: Registry[type[Task]] = Registry("task", package="tasks", fixed=("data_dir",), option_noun="data setting")
register_task = TASKS.register


def task_options(name: str) -> dict[str, Any]:
    """The `data:` settings task `name` takes, with defaults."""
    return TASKS.options(name)


def build_task(name: str, data_dir: str | os.PathLike[str] | None = None, **options: Any) -> Task:
    """Build task `name` with the config's data settings; unknown settings fail with the valid ones."""
    return TASKS.build(name, options, data_dir=data_dir)
