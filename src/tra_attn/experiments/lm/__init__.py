"""Language modelling on real text: ``tra lm compare`` (the comparison), ``tra lm eval``, ``tra lm sample``."""

from .cli import add_commands
from .report import write_report

TASK = "lm"

__all__ = ["TASK", "add_commands", "write_report"]
