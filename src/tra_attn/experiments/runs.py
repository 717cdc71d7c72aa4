"""Run bookkeeping shared by every experiment: which methods, and where each run lives."""

from __future__ import annotations

import math
from pathlib import Path

from ..layers import ATTENTION_KINDS


def check_methods(methods) -> list[str]:
    """``methods`` as a list, or a ValueError naming those that are not registered attention kinds."""
    unknown = [m for m in methods if m not in ATTENTION_KINDS]
    if unknown:
        raise ValueError(f"--methods: unknown method(s) {unknown}; expected names from {list(ATTENTION_KINDS)}")
    return list(methods)


def run_dir(out: Path, method: str, lr: float, seed: int) -> Path:
    """The directory of one (method, learning rate, seed) run inside an experiment's output folder."""
    return out / "runs" / method / f"lr{lr:g}-seed{seed}"


def check_run_arguments(seeds: list[int], steps: int | None, lrs: list[float] | None) -> None:
    """The seeds, step override and learning-rate sweep of an experiment, or a ValueError naming the flag."""
    if not seeds:
        raise ValueError("--seeds: expected at least one seed")
    if steps is not None and steps <= 0:
        raise ValueError(f"--steps = {steps}; expected a positive integer")
    if lrs is not None and not all(isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0 for lr in lrs):
        raise ValueError(f"--lrs = {lrs}; expected finite positive learning rates")


def preset_lr(lrs: dict[str, float], lr: float | None, method: str) -> float:
    """A preset's learning rate for ``method``: its validated one, else the preset-wide one, else the
    registry default (so a newly registered kind runs with no preset change)."""
    if method in lrs:
        return lrs[method]
    return lr if lr is not None else ATTENTION_KINDS[method].lr
