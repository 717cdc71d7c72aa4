"""Experiments: one subpackage each (presets, run, report, CLI commands), found by discovery.

An experiment package defines ``TASK`` (the task name its result rows carry; ``TASKS`` if several),
``add_commands(subparsers)`` (its ``tra`` subcommands) and, once it publishes a page,
``write_report(out, command="", notes=None, markdown=None)``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def experiments() -> dict[str, ModuleType]:
    """Every experiment package of this folder, keyed by the task its rows carry."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            module = importlib.import_module(f"{__name__}.{info.name}")
            for task in getattr(module, "TASKS", (module.TASK,)):
                found[task] = module
    return found
