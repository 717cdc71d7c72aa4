"""Argument parsing shared by every ``tra`` subcommand: one error line, and values checked as they are read.

A bad argument is refused by the parser itself, before any work: exit 2 and one line that names the flag,
``tra: error: argument --steps: invalid int value: 'x' (`tra train --help` lists the flags)``, instead of
argparse's usage block and a ``tra train: error:`` line. Types check what the parser can know: a finite
number (``finite_float``: 'nan' and 'inf' parse as floats), and a path that is not empty (``path_arg``: Python reads
'' as the current folder) or, for a file, not a folder (``file_arg``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


class Parser(argparse.ArgumentParser):
    """An ArgumentParser (and, through ``add_subparsers``, every subcommand's) whose errors are one line."""

    def error(self, message: str):
        """Exit 2 with ``tra: error: MESSAGE`` on one line (control characters of the message escaped)."""
        line = message.replace("\r", "\\r").replace("\n", "\\n")
        self.exit(2, f"tra: error: {line} (`{self.prog} --help` lists the flags)\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, after refusing a flag this subcommand does not have: argparse would first report the
        required flags missing (``--out``), hiding the misspelt one that was meant to be one of them."""
        if args is not None and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            known = [option for action in self._actions for option in action.option_strings]
            # Flags that take exactly one value: the token after one is its value, even a bad one ('--0'), and
            # argparse names the flag in its error.
            takes_one = {o for a in self._actions if a.nargs is None and a.option_strings for o in a.option_strings}
            previous = None
            for token in args:
                if token == "--":  # everything after is a positional argument
                    break
                name = token.split("=", 1)[0]
                value_of_previous = previous in takes_one
                previous = token
                if value_of_previous:
                    continue
                if name.startswith("--") and not any(
                    o == name or (self.allow_abbrev and o.startswith(name)) for o in known
                ):
                    self.error(f"unrecognized argument {name}")
        return super().parse_known_args(args, namespace)

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            sys.stderr.write(message)
            sys.stderr.flush()
        sys.exit(status)


def finite_float(text: str) -> float:
    """An argparse type: a finite number ('nan' and 'inf' are refused, as they are nowhere meaningful)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}; expected a finite number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}; expected a finite number")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number, at least 1 (threads, jobs)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}; expected a whole number, at least 1")
    return value


NAME_MAX, PATH_MAX = 255, 4096  # bytes: the longest file name and path Linux (and macOS, 1024) take


def path_arg(text: str) -> Path:
    """An argparse type: a path that is not empty or blank (``Path('')`` is the current folder, which no flag
    means: an empty value is a mistake, such as an unset shell variable), nor longer than a file system takes."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path; expected a file or folder name")
    value = Path(text)
    longest = max(len(part.encode(errors="surrogateescape")) for part in value.parts)
    if longest > NAME_MAX or len(text.encode(errors="surrogateescape")) > PATH_MAX:
        raise argparse.ArgumentTypeError(
            f"a path of {len(text)} characters is too long; expected names of at most {NAME_MAX} bytes and a path "
            f"of at most {PATH_MAX}"
        )
    return value


def file_arg(text: str) -> Path:
    """An argparse type: the path of a file (to read or write), not empty and not an existing folder."""
    value = path_arg(text)
    if value.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; expected a file")
    return value


def device_arg(text: str) -> str:
    """An argparse type: a device this machine has (``training.config.check_device``), checked before any work."""
    from ..training.config import check_device

    try:
        return check_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
