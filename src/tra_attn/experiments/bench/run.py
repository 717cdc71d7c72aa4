"""A comparison on one procedural task: every method on the same data, seeds and budget, each at its own
learning rate chosen on validation data, then evaluated on every test split of the task.

With several learning rates, each method keeps the one with the best validation (held-out, training
distribution) full-sequence accuracy, values at or above the fit threshold counting as equal and ties
going to the smallest rate; the test splits play no part. The sweep runs on ``sweep_seeds`` (default:
every seed); the other seeds then run at the selected rate only. With ``fit_accuracy`` in the preset
(or given), every run trains to fit: it stops at the first validation that reaches it, ``steps`` being
the cap, and its rows record the steps it took. Finished runs are skipped, unfinished ones resume.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...data import make_task
from ...layers import ATTENTION_KINDS
from ...models import ModelConfig
from ...training import TrainConfig, train
from ...training.checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint, load_train_state
from ...training.evaluation import evaluate_checkpoint, result_rows
from ...training.loop import METRICS_NAME
from ...utils.jsonl import read_jsonl, write_jsonl
from ..fit import FIT_ACCURACY
from ..methods import resolve_method
from ..preset import Preset
from ..runs import plan_comparison, run_dir, write_selection
from ..selection import select_lrs as select_best_lrs


def run_config(
    task_name: str,
    preset: Preset,
    method: str,
    lr: float,
    seed: int,
    steps: int | None,
    device: str,
    fit_accuracy: float | None = None,
) -> TrainConfig:
    """The TrainConfig of one run: the preset's model and recipe, the method's changes, and the overrides."""
    task = make_task(task_name, **preset.task_args)
    variant = resolve_method(method)
    model = ModelConfig(vocab_size=task.vocab_size, attention=variant.attention, **{**preset.model, **variant.model})
    train_args = {**preset.train, **variant.train}
    if steps is not None:
        train_args["steps"] = steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], steps)
    if fit_accuracy is not None:
        train_args["fit_accuracy"] = fit_accuracy
    return TrainConfig(
        task=task_name, task_args=dict(preset.task_args), model=model, lr=lr, seed=seed, device=device, **train_args
    )


def test_splits(config: TrainConfig) -> set[tuple[str, int]]:
    """(split, reported length) of every test split of the run's task."""
    splits = config.task_instance().eval_splits(config.length, 1)
    return {(s.split, s.length or s.batch.tokens.shape[1]) for s in splits}


def evaluate_final_checkpoint(method: str, config: TrainConfig, directory: Path, eval_sequences: int) -> list[dict]:
    """Test-split rows of a run's final checkpoint, named after ``method`` (a kind or a variant)."""
    checkpoint = latest_checkpoint(directory)
    rows = evaluate_checkpoint(checkpoint, sequences=eval_sequences, device=config.device)
    return [{**r, "method": method, "lr": config.lr} for r in rows]


def validation_rows(method: str, config: TrainConfig, directory: Path) -> list[dict]:
    """The run's last validation, its training time and, for a run trained to fit, its steps (and the step
    it fitted at, if it did)."""
    _, state = load_train_state(latest_checkpoint(directory))
    validation = [r for r in read_jsonl(directory / METRICS_NAME) if "val_full_seq_acc" in r][-1]
    metrics = {
        "full_seq_acc": validation["val_full_seq_acc"],
        "loss": validation["val_loss"],
        "train_seconds": state["train_seconds"],
    }
    if config.fit_accuracy:
        metrics["steps"] = state["step"]
        if state.get("fit_step") is not None:
            metrics["steps_to_fit"] = state["fit_step"]
    common = {"method": method, "seed": config.seed, "config": config.to_dict(), "lr": config.lr}
    return result_rows(metrics, task=config.task, split="validation", length=config.length, **common)


def run_one(
    method: str, config: TrainConfig, directory: Path, eval_sequences: int, progress: bool, upgrade=lambda rows: rows
) -> list[dict]:
    """Train and evaluate one run of ``method``, or return its saved rows if it already finished with this
    config (rows saved before a test split existed are completed by evaluating the final checkpoint again)."""
    rows_path = directory / "eval.jsonl"
    saved = directory / TRAIN_CONFIG_NAME
    if saved.is_file() and TrainConfig.from_dict(json.loads(saved.read_text())).to_dict() != config.to_dict():
        raise ValueError(f"{directory} holds a run with a different config; use another --out or remove it")
    if rows_path.is_file():
        rows = upgrade(read_jsonl(rows_path))
        if test_splits(config) <= {(r["split"], r["length"]) for r in rows}:
            return rows
        validation = [r for r in rows if r["split"] == "validation"]
        rows = validation + evaluate_final_checkpoint(method, config, directory, eval_sequences)
        write_jsonl(rows_path, rows)
        return rows
    train(config, directory, resume=latest_checkpoint(directory) is not None, progress=progress)
    rows = evaluate_final_checkpoint(method, config, directory, eval_sequences)
    rows += validation_rows(method, config, directory)
    write_jsonl(rows_path, rows)
    return rows


def select_lrs(rows: list[dict], fit_accuracy: float = FIT_ACCURACY) -> dict[str, float]:
    """Per method, the learning rate with the best mean validation full-sequence accuracy, every value at or
    above ``fit_accuracy`` counting as equal (a fitted run stops as soon as it fits, so the margin above the
    threshold is noise); ties go to the smallest rate."""
    capped = [
        {**r, "value": min(r["value"], fit_accuracy)} if r["metric"] == "full_seq_acc" else r
        for r in rows
        if r["split"] == "validation"
    ]
    return select_best_lrs(capped, "full_seq_acc", higher_is_better=True)


def run_comparison(
    task_name: str,
    presets: dict[str, Preset],
    preset_name: str = "cpu",
    methods=None,
    seeds=None,
    steps: int | None = None,
    lrs: list[float] | None = None,
    out: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
    sweep_seeds=None,
    fit_accuracy: float | None = None,
    experiment: str | None = None,
    upgrade=lambda rows: rows,
) -> Path:
    """Run (or finish) the comparison; write results.jsonl (and with a sweep sweep.jsonl and
    selected_lrs.json) and run.json to ``out``. The caller writes the page."""
    swept = bool(lrs) and len(lrs) > 1
    if fit_accuracy is not None and not 0.0 <= fit_accuracy <= 1.0:
        raise ValueError(f"--fit-accuracy = {fit_accuracy}; expected a number in [0, 1] (0: train every step)")
    if sweep_seeds is not None and not swept:
        raise ValueError("--sweep-seeds sets the seeds of a learning-rate sweep; expected --lrs with 2 or more rates")
    preset, methods, seeds, out = plan_comparison(
        experiment or f"bench_{task_name}", presets, preset_name, methods, list(ATTENTION_KINDS), seeds, steps, lrs, out
    )
    sweep_seeds = list(seeds if sweep_seeds is None else sweep_seeds)
    if not sweep_seeds or not set(sweep_seeds) <= set(seeds):
        raise ValueError(f"--sweep-seeds = {sweep_seeds}; expected some of the seeds {seeds}")

    def run(method: str, lr: float, seed: int) -> list[dict]:
        config = run_config(task_name, preset, method, lr, seed, steps, device, fit_accuracy)
        directory = run_dir(out, method, lr, seed)
        print(f"[{task_name}] {method} lr={lr:g} seed={seed} -> {directory}", flush=True)
        return run_one(method, config, directory, preset.eval_sequences, progress, upgrade)

    sweep = [row for m in methods for lr in lrs or [preset.lr_for(m)] for s in sweep_seeds for row in run(m, lr, s)]
    selected = select_lrs(sweep)
    rows = list(sweep)
    for method in methods:
        for seed in seeds:
            if seed not in sweep_seeds:
                rows += run(method, selected[method], seed)
    description = f"{preset_name}: {preset.description}"
    source = preset.learning_rate_source(lrs)
    write_selection(out, rows, selected, swept, command, description, sweep_rows=sweep, learning_rates=source)
    return out
