"""The flip-flop experiment (Liu et al. 2023; the TRA paper's main synthetic task): presets, run, report."""

from .cli import add_commands
from .presets import PRESETS
from .report import write_report

TASK = "flipflop"

__all__ = ["PRESETS", "TASK", "add_commands", "write_report"]
