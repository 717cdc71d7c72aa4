"""The flip-flop comparison: TRA, its ablations and every baseline on the same data, seeds and budget.

Every method trains on FFL(0.8) and is evaluated on IID FFL(0.8), sparse FFL(0.98) and dense FFL(0.1)
at the training length, on IID sequences 2x, 4x and 8x longer and on sparse sequences 8x longer. The
protocol (learning-rate selection on validation data, train-to-fit, resuming) is the one of every
procedural task: ``experiments/bench/run.py``.
"""

from __future__ import annotations

from pathlib import Path

from ...data.synthetic.flipflop import FlipFlop
from ..bench.run import run_comparison, select_lrs
from ..bench.run import run_config as bench_run_config
from .presets import PRESETS, Preset
from .rows import upgrade_rows

__all__ = ["run_config", "run_flipflop", "select_lrs"]


def run_config(preset: Preset, method: str, lr: float, seed: int, steps: int | None, device: str, fit_accuracy=None):
    return bench_run_config(FlipFlop.name, preset, method, lr, seed, steps, device, fit_accuracy)


def run_flipflop(preset_name: str = "cpu", **kwargs) -> Path:
    """Run (or finish) the comparison and write results.jsonl, results.md and accuracy.png to its folder.

    Keyword arguments are those of ``run_comparison`` (methods, seeds, steps, lrs, out, device, progress,
    command, sweep_seeds, fit_accuracy)."""
    from .report import write_report

    out = run_comparison(FlipFlop.name, PRESETS, preset_name, experiment="flipflop", upgrade=upgrade_rows, **kwargs)
    write_report(out)
    return out
