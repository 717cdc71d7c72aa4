"""Run bookkeeping shared by every experiment: which methods, where each run lives, what it writes."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..utils.atomic import atomic_write_text
from ..utils.rows import write_rows
from .methods import family_patterns, method_names, resolve_method

DIVERGED = "diverged"  # the metric of a run whose training diverged: the step (engine.py)


def check_methods(methods) -> list[str]:
    """``methods`` as a list, or a ValueError naming those that are not methods (experiments/methods.py) or that
    are given twice."""
    unknown = []
    for method in methods:
        try:
            resolve_method(method)
        except ValueError:
            unknown.append(method)
    if unknown:
        raise ValueError(
            f"--methods: unknown method(s) {unknown}; expected names from {method_names()} or members of the "
            f"families {family_patterns()}"
        )
    return check_distinct(methods, "--methods")


def check_distinct(values, flag: str) -> list:
    """``values`` as a list, or a ValueError naming ``flag`` and the values given more than once: a repeated
    method, seed, rate or task would run once and write its rows twice."""
    values = list(values)
    repeated = [v for i, v in enumerate(values) if v in values[:i]]
    if repeated:
        raise ValueError(f"{flag}: {sorted(set(repeated), key=values.index)} given more than once; expected each once")
    return values


def run_dir(out: Path, method: str, lr: float, seed: int) -> Path:
    """The directory of one (method, learning rate, seed) run inside an experiment's output folder."""
    return out / "runs" / method / f"lr{lr:g}-seed{seed}"


def check_run_arguments(seeds: list[int], steps: int | None, lrs: list[float] | None) -> None:
    """The seeds, step override and learning-rate sweep of an experiment, or a ValueError naming the flag."""
    if not seeds:
        raise ValueError("--seeds: expected at least one seed")
    check_distinct(seeds, "--seeds")
    check_distinct(lrs or [], "--lrs")
    if steps is not None and steps <= 0:
        raise ValueError(f"--steps = {steps}; expected a positive integer")
    if lrs is not None and not all(isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0 for lr in lrs):
        raise ValueError(f"--lrs = {lrs}; expected finite positive learning rates")


def write_selection(
    out: Path,
    rows: list[dict],
    selected: dict[str, float],
    swept: bool,
    command: str,
    preset: str,
    sweep_rows: list[dict] | None = None,
    learning_rates: str = "",
):
    """results.jsonl (the rows of each method's selected learning rate), and with a sweep of several rates
    sweep.jsonl (the sweep's rows: ``sweep_rows``, default every row) and selected_lrs.json; run.json records
    the command, the preset and, without a sweep, where the learning rates came from (``learning_rates``)."""
    write_rows(out / "results.jsonl", [r for r in rows if r["lr"] == selected[r["method"]]])
    if swept:
        write_rows(out / "sweep.jsonl", rows if sweep_rows is None else sweep_rows)
        atomic_write_text(out / "selected_lrs.json", json.dumps(selected, indent=2, sort_keys=True))
    recorded = {"command": command, "preset": preset}
    if learning_rates and not swept:
        recorded["learning_rates"] = learning_rates
    atomic_write_text(out / "run.json", json.dumps(recorded))
