"""An experiment as a record: what the comparison engine needs to know of a task, and nothing it does.

Adding a task to comparisons is one ``Experiment`` registered with ``register_experiment``
(``experiments/registry.py``); ``run_comparison`` (``experiments/engine.py``) runs any of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..training import TrainConfig
from .preset import Preset
from .selection import select_lrs

Rows = list[dict]


@dataclass(frozen=True)
class Experiment:
    """A comparison of methods on one task.

    ``name``: how commands and the registry call it (``tra compare NAME``; default output folder
    ``runs/<name>_<preset>``); ``task``: the data task its runs train on. ``evaluate(method, config,
    directory, budget)`` gives the test rows of a run's final checkpoint (``budget``: the preset's
    ``eval_budget``), ``validation(method, config, directory)`` the rows of its last validation, training
    time and cost; ``test_splits(config)`` the (split, length) pairs a finished run's rows must hold (rows
    missing one are completed from the final checkpoint). Learning rates are chosen on the validation rows
    of ``selection_metric``; ``fit_accuracy``: the fit threshold of a task scored per sequence, at or above
    which validation values count as equal in that choice (None: runs cannot train to fit).
    ``write_report(out, command=, notes=, markdown=)`` writes the page of a results folder; ``upgrade``
    brings rows saved by older versions up to date. ``command``: a ``tra`` command of its own that runs
    this comparison (an alias of ``tra compare NAME``), ``summary`` its one-line help; ``suite``: one of the
    tasks of ``tra compare --suite``; ``states_learning_rates``: whether run.json records where the rates
    of a run without a sweep came from (pages that say so).
    """

    name: str
    task: str
    presets: Mapping[str, Preset]
    evaluate: Callable[[str, TrainConfig, Path, int | None], Rows]
    validation: Callable[[str, TrainConfig, Path], Rows]
    test_splits: Callable[[TrainConfig], set[tuple[str, int]]]
    write_report: Callable[..., Path]
    selection_metric: str
    higher_is_better: bool
    summary: str
    fit_accuracy: float | None = None
    default_methods: tuple[str, ...] | None = None  # None: every registered attention kind
    upgrade: Callable[[Rows], Rows] | None = None
    command: str | None = None
    suite: bool = False
    states_learning_rates: bool = True

    def select_lrs(self, rows: Rows) -> dict[str, float]:
        """Per method, the learning rate with the best mean validation ``selection_metric`` over seeds."""
        return select_lrs(rows, self.selection_metric, self.higher_is_better, cap=self.fit_accuracy)
