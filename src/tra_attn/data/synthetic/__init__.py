"""Procedural tasks behind one protocol (``base.Task``). No downloads: every task generates its own data.

Every module of this package is imported here, so a task registers itself with ``@register_task`` in
its own file and nothing else needs to list it.
"""

import importlib
import pkgutil

from .base import TASKS, EvalSplit, Task, TaskBatch, make_task, register_task, split_sequences

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TASKS", "Task", "TaskBatch", "EvalSplit", "make_task", "register_task", "split_sequences"]
