"""Run bookkeeping shared by every experiment: which methods, and where each run lives."""

from __future__ import annotations

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
