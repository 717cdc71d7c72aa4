"""Language modelling on real text: ``tra lm sample`` (the comparison and its report are still to come)."""

from .cli import add_commands

TASK = "lm"

__all__ = ["TASK", "add_commands"]
