"""The experiments questions run on, keyed by task: each experiment package's records, and any record registered
with ``register_experiment`` (a plug-in's or a test's)."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from .experiment import Experiment

_REGISTERED: dict[str, Experiment] = {}


def register_experiment(experiment: Experiment, replace: bool = False) -> Experiment:
    """Add ``experiment`` under its name; refuses to overwrite an existing name unless ``replace``."""
    if not isinstance(experiment, Experiment):
        raise TypeError(f"register_experiment: experiment = {experiment!r}; expected an Experiment")
    if experiment.task in experiments() and not replace:
        raise ValueError(f"register_experiment: {experiment.task!r} is already registered; pass replace=True")
    _REGISTERED[experiment.task] = experiment
    return experiment


SHARED_PACKAGES = ("pages",)  # what the experiment packages share: no experiments of its own


@functools.cache
def _packaged() -> dict[str, Experiment]:
    """The records of this folder's experiment packages (each lists its own in ``EXPERIMENTS``)."""
    found = {}
    for info in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        if info.ispkg and info.name not in SHARED_PACKAGES:
            found.update((e.task, e) for e in importlib.import_module(f"{__package__}.{info.name}").EXPERIMENTS)
    return found


def experiments() -> dict[str, Experiment]:
    """Every experiment: those of this folder's packages, then the registered ones (which may replace them)."""
    return {**_packaged(), **_REGISTERED}


def experiment(task: str, what: str = "task") -> Experiment:
    """The experiment of ``task``, or a ValueError naming ``what`` and the tasks that have one."""
    found = experiments()
    if task not in found:
        raise ValueError(f"{what} = {task!r}; expected a task with an experiment, one of {sorted(found)}")
    return found[task]
