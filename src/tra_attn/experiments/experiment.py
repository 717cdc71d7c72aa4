"""An experiment as a record: how the runs of one task are evaluated, compared and shown.

Adding a task to questions is one ``Experiment`` listed in its package's ``EXPERIMENTS`` (``registry.py`` finds
them); the engine (``engine.py``) runs any question on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..training import TrainConfig
from .preset import Preset
from .selection import extension, mean_scores, select_lrs

Rows = list[dict]


@dataclass(frozen=True)
class Experiment:
    """Questions on one task.

    ``evaluate(config, directory, budget)``: the lean test rows of a run's final checkpoint (``budget``: the
    preset's ``eval_budget``, in ``budget_unit``); ``validation(config, directory)``: the rows of its last
    validation, training time and, for a run trained to fit, its steps. Learning rates are chosen on the
    validation ``selection_metric``; ``fit_accuracy``: the fit threshold of a task scored per sequence, at or
    above which validation values count as equal in that choice (None: runs cannot train to fit).
    ``section(results, folder, page, level, plots)``: the page's lines of this task (``engine.Results``);
    ``summary(all_results, folder, page, plots)``: the lines that open a page of several tasks whose experiments
    all share it (None: the suite's summary, ``pages.procedural.suite_summary``).
    """

    task: str
    presets: Mapping[str, Preset]
    evaluate: Callable[[TrainConfig, Path, int | None], Rows]
    validation: Callable[[TrainConfig, Path], Rows]
    section: Callable[..., list[str]]
    selection_metric: str
    higher_is_better: bool
    budget_unit: str
    fit_accuracy: float | None = None
    summary: Callable[..., list[str]] | None = None

    def select_lrs(self, rows: Rows) -> dict[str, float]:
        """Per method, the learning rate with the best mean validation ``selection_metric`` over seeds."""
        return select_lrs(rows, self.selection_metric, self.higher_is_better, cap=self.fit_accuracy)

    def next_rate(self, rows: Rows, grid: tuple[float, ...], added: tuple[int, int]) -> float | None:
        """The rate one method's sweep ``rows`` over ``grid`` add next (``selection.extension``), or None."""
        scores = mean_scores(rows, self.selection_metric, self.higher_is_better, cap=self.fit_accuracy)
        if not scores:
            return None
        (method,) = {method for method, _ in scores}
        chosen = max(sorted(lr for _, lr in scores), key=lambda lr: scores[(method, lr)])  # ties: the smallest rate
        sign = 1.0 if self.higher_is_better else -1.0
        ceiling = math.inf if self.fit_accuracy is None else sign * self.fit_accuracy
        return extension(grid, chosen, scores[(method, chosen)], ceiling, added)

    def evaluation(self, preset: Preset) -> str:
        """The name of the preset's evaluation in a run's record: ``sequences=1000``."""
        return f"{self.budget_unit}={preset.eval_budget if preset.eval_budget is not None else 'all'}"
