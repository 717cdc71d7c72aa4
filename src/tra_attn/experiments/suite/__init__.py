"""The length-generalisation suite's procedural tasks (hierarchy, MQAR, selective copy, majority): their presets
and their section of a page."""

from ..pages.procedural import task_section
from ..procedural import procedural_experiment
from .presets import PRESETS, SUITE_TASKS

EXPERIMENTS = tuple(procedural_experiment(task, PRESETS[task], task_section) for task in SUITE_TASKS)

__all__ = ["EXPERIMENTS", "SUITE_TASKS"]
