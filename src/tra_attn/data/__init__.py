"""Data sources behind one task protocol (``task.py``): procedural tasks (``synthetic``) and real text (``text``).

Importing this package registers every task of both, so ``make_task`` knows them all.
"""

from . import synthetic, text  # noqa: E402, F401  (registration; after the protocol they import)
from .task import (
    TASKS,
    EvalSplit,
    Task,
    TaskBatch,
    absolute_task_args,
    check_scored,
    default_task,
    make_task,
    recorded_task_args,
    register_task,
    split_sequences,
)

__all__ = [
    "TASKS",
    "EvalSplit",
    "Task",
    "TaskBatch",
    "absolute_task_args",
    "check_scored",
    "default_task",
    "make_task",
    "recorded_task_args",
    "register_task",
    "split_sequences",
]
