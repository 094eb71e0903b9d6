"""LRA tasks behind one interface, found by name in `tasks.registry.TASKS` (every module here is discovered)."""

from lra.core.errors import DataMissingError
from tasks.registry import TASKS, Split, Task, build_task, default_data_dir, register_task

__all__ = ["TASKS", "DataMissingError", "Split", "Task", "build_task", "default_data_dir", "register_task"]
