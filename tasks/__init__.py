"""LRA tasks behind one interface (`tasks.base.Task`), found by name in `tasks.registry.TASKS` (every module here is
discovered)."""

from lra.core.errors import DataMissingError
from tasks.base import Split, Task, default_data_dir
from tasks.registry import TASKS, build_task, register_task

__all__ = ["TASKS", "DataMissingError", "Split", "Task", "build_task", "default_data_dir", "register_task"]
