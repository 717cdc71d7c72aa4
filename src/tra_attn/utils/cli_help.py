"""Help formatting shared by every ``tra`` subcommand: each flag's help states its default."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends '(default: X)' to every help text that does not already state its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default:" in text or action.default in (None, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)
