"""The ASEntmax authors' synthetic suite (copy, reverse, sort, MQMTAR, flip-flop, 2-back, local count): per task a
CPU preset on their training lengths, its section of a page (exact match per test seq_len, their published cells
beside ours) and the summary of a page of several of them."""

from ..procedural import procedural_experiment
from .presets import ASENTMAX_TASKS, PRESETS
from .report import asentmax_section, asentmax_summary

EXPERIMENTS = tuple(
    procedural_experiment(task, PRESETS[task], asentmax_section, summary=asentmax_summary) for task in ASENTMAX_TASKS
)

__all__ = ["ASENTMAX_TASKS", "EXPERIMENTS"]
