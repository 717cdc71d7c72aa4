"""Procedural-task comparisons and the length-generalisation suite (``tra bench``): presets, run, report."""

from .cli import add_commands
from .presets import SUITE_TASKS
from .report import write_report

TASK = SUITE_TASKS[0]
TASKS = SUITE_TASKS  # the tasks whose rows this package's page reports (other tasks' packages report theirs)

__all__ = ["TASK", "TASKS", "add_commands", "write_report"]
