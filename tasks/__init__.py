"""LRA tasks behind one interface, found by name in `tasks.registry.TASKS` (every module here is discovered)."""

from tasks.registry import TASKS, DataMissingError, Split, Task, build_task, default_data_dir, register_task

__all__ = ["TASKS", "DataMissingError", "Split", "Task", "build_task", "default_data_dir", "register_task"]
