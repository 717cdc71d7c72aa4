"""The comparison engine: every method of an experiment on the same data, seeds and budget, each at its own
learning rate chosen on validation data, then evaluated as the experiment says.

With several learning rates, each method keeps the one with the best mean validation value of the
experiment's selection metric (``Experiment.select_lrs``; the test splits play no part). The sweep runs on
``sweep_seeds`` (default: every seed); the other seeds then run at the selected rate only. With
``fit_accuracy`` in the preset (or given), every run trains to fit: it stops at the first validation that
reaches it, ``steps`` being the cap. Finished runs are skipped, unfinished ones resume.

A run whose training diverges (``TrainingDiverged``) is recorded as such, not as an accuracy: its rows are
its validation ``selection_metric`` as NaN (so the selection ranks its rate last) and a ``diverged``
metric holding the step; the pages show "diverged" in its cells, and the other runs go on. Those rows are
final: a resumed comparison does not train the run again unless its folder is removed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..data import make_task
from ..layers import ATTENTION_KINDS
from ..models import ModelConfig
from ..training import TrainConfig, train
from ..training.checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint
from ..training.divergence import TrainingDiverged
from ..training.evaluation import result_rows
from ..utils.atomic import make_directory
from ..utils.provenance import git_commit
from ..utils.rows import read_rows, write_rows
from .experiment import Experiment
from .methods import TRA_ABLATIONS, resolve_method
from .preset import Preset
from .runs import DIVERGED, check_distinct, check_methods, check_run_arguments, run_dir, write_selection


def run_config(
    experiment: Experiment,
    preset: Preset,
    method: str,
    lr: float,
    seed: int,
    steps: int | None = None,
    device: str = "cpu",
    fit_accuracy: float | None = None,
    task_args: dict | None = None,
) -> TrainConfig:
    """The TrainConfig of one run: the preset's model, task and recipe, the method's changes, the overrides."""
    task_args = {**preset.task_args, **(task_args or {})}
    task = make_task(experiment.task, **task_args)
    variant = resolve_method(method)
    model = ModelConfig(
        vocab_size=task.vocab_size,
        tokenizer=task.tokenizer_description(),
        attention=variant.attention,
        attention_options={**preset.options.get(variant.attention, {}), **variant.options},
        **{**preset.model, **variant.model},
    )
    train_args = {**preset.train, **variant.train}
    if steps is not None:
        train_args["steps"] = steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], steps)
    if fit_accuracy is not None:
        train_args["fit_accuracy"] = fit_accuracy
    return TrainConfig(
        task=experiment.task, task_args=task_args, model=model, lr=lr, seed=seed, device=device, **train_args
    )


def diverged_rows(experiment: Experiment, method: str, config: TrainConfig, step: int) -> list[dict]:
    """The rows of a run that diverged at ``step``: its validation ``selection_metric`` as NaN, and ``diverged``."""
    metrics = {experiment.selection_metric: math.nan, DIVERGED: step}
    common = {"method": method, "seed": config.seed, "lr": config.lr, "config": config.to_dict()}
    return result_rows(metrics, task=config.task, split="validation", length=config.length, **common)


def run_one(
    experiment: Experiment, method: str, config: TrainConfig, directory: Path, budget: int | None, progress: bool
) -> list[dict]:
    """Train and evaluate one run of ``method``, or return its saved rows if it already finished (or diverged)
    with this config (rows saved before a test split existed are completed by evaluating the final checkpoint
    again)."""
    rows_path = directory / "eval.jsonl"
    saved = directory / TRAIN_CONFIG_NAME
    if saved.is_file() and TrainConfig.from_dict(json.loads(saved.read_text())).to_dict() != config.to_dict():
        raise ValueError(f"{directory} holds a run with a different config; use another --out or remove it")
    if rows_path.is_file():
        rows = read_rows(rows_path)
        rows = experiment.upgrade(rows) if experiment.upgrade else rows
        evaluated = {(r["split"], r["length"]) for r in rows}
        if any(r["metric"] == DIVERGED for r in rows) or experiment.test_splits(config) <= evaluated:
            return rows
        validation = [r for r in rows if r["split"] == "validation"]
        rows = validation + experiment.evaluate(method, config, directory, budget)
    else:
        try:
            train(config, directory, resume=latest_checkpoint(directory) is not None, progress=progress)
        except TrainingDiverged as err:
            print(f"{directory}: {err}; recorded as diverged", flush=True)
            rows = diverged_rows(experiment, method, config, err.step)
        else:
            rows = experiment.evaluate(method, config, directory, budget)
            rows += experiment.validation(method, config, directory)
    write_rows(rows_path, rows)
    return rows


def check_comparison(experiment: Experiment, preset_name: str, methods, seeds, steps, lrs, sweep_seeds, fit_accuracy):
    """(preset, methods, seeds, sweep seeds) of a comparison, or a ValueError naming the flag; before any work."""
    if preset_name not in experiment.presets:
        raise ValueError(f"--preset = {preset_name!r}; expected one of {sorted(experiment.presets)}")
    preset = experiment.presets[preset_name]
    if fit_accuracy is not None and not 0.0 <= fit_accuracy <= 1.0:
        raise ValueError(f"--fit-accuracy = {fit_accuracy}; expected a number in [0, 1] (0: train every step)")
    if fit_accuracy and experiment.fit_accuracy is None:
        raise ValueError(
            f"--fit-accuracy = {fit_accuracy}: the {experiment.name} comparison cannot train to fit (its validation "
            "has no full-sequence accuracy); expected no --fit-accuracy, or 0"
        )
    methods = check_methods(methods or experiment.default_methods or [*ATTENTION_KINDS, *TRA_ABLATIONS])
    seeds = list(preset.seeds if seeds is None else seeds)
    check_run_arguments(seeds, steps, lrs)
    if sweep_seeds is not None and not (lrs and len(lrs) > 1):
        raise ValueError("--sweep-seeds sets the seeds of a learning-rate sweep; expected --lrs with 2 or more rates")
    sweep_seeds = check_distinct(seeds if sweep_seeds is None else sweep_seeds, "--sweep-seeds")
    if not sweep_seeds or not set(sweep_seeds) <= set(seeds):
        raise ValueError(f"--sweep-seeds = {sweep_seeds}; expected some of the seeds {seeds}")
    return preset, methods, seeds, sweep_seeds


def run_comparison(
    experiment: Experiment,
    preset_name: str = "cpu",
    methods=None,
    seeds=None,
    steps: int | None = None,
    lrs: list[float] | None = None,
    sweep_seeds=None,
    fit_accuracy: float | None = None,
    out: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
    task_args: dict | None = None,
) -> Path:
    """Run (or finish) the comparison; write results.jsonl (and with a sweep sweep.jsonl and
    selected_lrs.json), run.json and the experiment's page to ``out`` (default ``runs/<name>_<preset>``).

    ``task_args`` override the preset's task parameters (a corpus folder, say). Every argument is checked
    and the code version recorded before any work.
    """
    preset, methods, seeds, sweep_seeds = check_comparison(
        experiment, preset_name, methods, seeds, steps, lrs, sweep_seeds, fit_accuracy
    )
    make_task(experiment.task, **{**preset.task_args, **(task_args or {})}).check_data()  # before --out exists
    out = make_directory(out or f"runs/{experiment.name}_{preset_name}", "--out")
    git_commit()  # now, before anything can change the working tree

    def run(method: str, lr: float, seed: int) -> list[dict]:
        config = run_config(experiment, preset, method, lr, seed, steps, device, fit_accuracy, task_args)
        directory = run_dir(out, method, lr, seed)
        print(f"[{experiment.name}] {method} lr={lr:g} seed={seed} -> {directory}", flush=True)
        return run_one(experiment, method, config, directory, preset.eval_budget, progress)

    sweep = [row for m in methods for lr in lrs or [preset.lr_for(m)] for s in sweep_seeds for row in run(m, lr, s)]
    selected = experiment.select_lrs(sweep)
    rows = sweep + [row for m in methods for s in seeds if s not in sweep_seeds for row in run(m, selected[m], s)]
    swept = bool(lrs) and len(lrs) > 1
    source = preset.learning_rate_source(lrs) if experiment.states_learning_rates else ""
    description = f"{preset_name}: {preset.description}"
    write_selection(out, rows, selected, swept, command, description, sweep_rows=sweep, learning_rates=source)
    experiment.write_report(out)
    return out
