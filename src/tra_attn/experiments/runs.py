"""Run bookkeeping shared by every experiment: its flags, which methods, where each run lives, what it writes."""

from __future__ import annotations

import argparse
import json
import math
import shlex
from collections.abc import Iterator
from pathlib import Path

from ..utils.atomic import atomic_write_text, make_directory
from ..utils.jsonl import write_jsonl
from ..utils.provenance import git_commit
from .methods import VARIANTS, method_names
from .methods import preset_lr as preset_lr  # re-exported: the presets take their learning rates from here


def check_methods(methods) -> list[str]:
    """``methods`` as a list, or a ValueError naming those that are not methods (experiments/methods.py)."""
    unknown = [m for m in methods if m not in method_names()]
    if unknown:
        raise ValueError(f"--methods: unknown method(s) {unknown}; expected names from {method_names()}")
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


def plan_comparison(
    experiment: str, presets: dict, preset_name: str, methods, default_methods, seeds, steps, lrs, out
) -> tuple:
    """(preset, methods, seeds, output folder) of a comparison, every argument checked before any work.

    ``methods`` default to ``default_methods``, ``seeds`` to the preset's, the folder to
    ``runs/<experiment>_<preset>``. The code version is recorded now, before anything can change the
    working tree.
    """
    if preset_name not in presets:
        raise ValueError(f"--preset = {preset_name!r}; expected one of {sorted(presets)}")
    preset = presets[preset_name]
    methods = check_methods(methods or default_methods)
    seeds = list(preset.seeds if seeds is None else seeds)
    check_run_arguments(seeds, steps, lrs)
    out = make_directory(out or f"runs/{experiment}_{preset_name}", "--out")
    git_commit()
    return preset, methods, seeds, out


def run_grid(preset, methods: list[str], lrs: list[float] | None, seeds: list[int]) -> Iterator[tuple[str, float, int]]:
    """(method, learning rate, seed) of every run: the swept rates, or else each method's preset rate."""
    for method in methods:
        for lr in lrs or [preset.lr_for(method)]:
            for seed in seeds:
                yield method, lr, seed


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
    write_jsonl(out / "results.jsonl", [r for r in rows if r["lr"] == selected[r["method"]]])
    if swept:
        write_jsonl(out / "sweep.jsonl", rows if sweep_rows is None else sweep_rows)
        atomic_write_text(out / "selected_lrs.json", json.dumps(selected, indent=2, sort_keys=True))
    recorded = {"command": command, "preset": preset}
    if learning_rates and not swept:
        recorded["learning_rates"] = learning_rates
    atomic_write_text(out / "run.json", json.dumps(recorded))


def comparison_arguments(args: argparse.Namespace) -> dict:
    """The keyword arguments of an experiment's run function from the flags of ``add_comparison_flags``."""
    return dict(
        methods=args.methods,
        seeds=args.seeds,
        steps=args.steps,
        lrs=args.lrs,
        out=args.out,
        device=args.device,
        progress=not args.no_progress,
        command="tra " + shlex.join(args.argv),
    )


def add_comparison_flags(parser: argparse.ArgumentParser, presets: dict, methods: str, lrs: str, out: str) -> None:
    """The flags every comparison takes: preset, methods, seeds, steps, a learning-rate sweep, output, device.

    ``methods``, ``lrs`` and ``out`` describe this experiment's defaults for the help texts.
    """
    described = ", ".join(f"{name} ({p.description})" for name, p in presets.items()).replace("%", "%%")
    parser.add_argument("--preset", default="cpu", help=f"model and recipe: {described}")
    parser.add_argument(
        "--methods",
        nargs="+",
        help=f"attention kinds or named variants ({', '.join(VARIANTS)}: see experiments/methods.py) to run "
        f"(default: {methods})",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the preset's)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    parser.add_argument(
        "--lrs",
        type=float,
        nargs="+",
        help=f"learning rates to sweep; each method keeps the best on validation data (default: {lrs})",
    )
    parser.add_argument("--out", type=Path, help=f"output directory (default: {out})")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_synthetic_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a comparison on a procedural task beyond ``add_comparison_flags``: the seeds the
    learning-rate sweep runs on, and train-to-fit."""
    parser.add_argument(
        "--sweep-seeds",
        type=int,
        nargs="+",
        help="with --lrs: the seeds every rate runs on; the other --seeds then run at each method's selected "
        "rate only (default: every seed)",
    )
    parser.add_argument(
        "--fit-accuracy",
        type=float,
        help="train to fit: stop a run at the first validation whose full-sequence accuracy reaches this, with "
        "--steps as the cap; 0 trains every step (default: the preset's)",
    )


def synthetic_arguments(args: argparse.Namespace) -> dict:
    """``comparison_arguments`` plus those of ``add_synthetic_flags``."""
    return {**comparison_arguments(args), "sweep_seeds": args.sweep_seeds, "fit_accuracy": args.fit_accuracy}
