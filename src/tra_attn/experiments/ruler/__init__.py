"""The small RULER on synthetic tokens (needles, variable tracking, common and frequent words): per task a CPU preset
trained at one length and tested at 1x-16x, its section of a page, and the summary of a page of several."""

from ..procedural import procedural_experiment
from .presets import NEEDLE_TASKS, PRESETS, RULER_TASKS
from .report import ruler_section, ruler_summary

EXPERIMENTS = tuple(
    procedural_experiment(task, PRESETS[task], ruler_section, summary=ruler_summary) for task in RULER_TASKS
)

__all__ = ["EXPERIMENTS", "NEEDLE_TASKS", "RULER_TASKS"]
