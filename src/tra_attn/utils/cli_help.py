"""Help formatting shared by every ``tra`` subcommand: each flag's help states its default, in plain text."""

from __future__ import annotations

import argparse
import copy


def plain(text: str) -> str:
    """Help text as a terminal shows it: docstrings' reStructuredText literals (double backticks) unmarked."""
    return text.replace("``", "")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends '(default: X)' to every help text that does not already state its default; shows descriptions
    and help texts written in docstring style (reStructuredText literals) as plain text."""

    def _get_help_string(self, action):
        text = plain(action.help or "")
        if "default:" in text or action.default in (None, argparse.SUPPRESS):
            return text
        shown = copy.copy(action)
        shown.help = text
        return super()._get_help_string(shown)

    def _format_text(self, text):
        return super()._format_text(plain(text))
