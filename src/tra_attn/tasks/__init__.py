"""Procedural task generators, selected by name. No downloads: every task generates its own data."""

from __future__ import annotations

from .flipflop import FlipFlop, TaskBatch

TASKS = {"flipflop": FlipFlop}


def make_task(name: str, **kwargs):
    if name not in TASKS:
        raise ValueError(f"task = {name!r}; expected one of {sorted(TASKS)}")
    return TASKS[name](**kwargs)


__all__ = ["TASKS", "FlipFlop", "TaskBatch", "make_task"]
