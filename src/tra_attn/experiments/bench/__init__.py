"""The length-generalisation suite's procedural tasks (``tra compare TASK``, ``tra compare --suite``): their
presets and the page of one task or of the whole suite."""

from ..procedural import procedural_experiment
from .presets import PRESETS, SUITE_TASKS
from .report import write_report

EXPERIMENTS = tuple(
    procedural_experiment(
        task,
        PRESETS[task],
        write_report,
        summary=f"a suite task: every method trained to fit on {task}, tested on longer and shifted-density splits",
        suite=True,
    )
    for task in SUITE_TASKS
)

__all__ = ["EXPERIMENTS"]
