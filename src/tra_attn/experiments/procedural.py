"""What a comparison on a procedural task evaluates: every test split of the task (longer and
shifted-density) from the final checkpoint, and the last validation's full-sequence accuracy, which chooses
the learning rates and decides whether a run fitted. ``procedural_experiment`` makes such a task's record.
"""

from __future__ import annotations

from pathlib import Path

from ..training import TrainConfig
from ..training.checkpoint import latest_checkpoint, load_train_state
from ..training.evaluation import evaluate_checkpoint, result_rows
from ..training.loop import METRICS_NAME
from ..utils.jsonl import read_jsonl
from .experiment import Experiment
from .fit import FIT_ACCURACY


def test_splits(config: TrainConfig) -> set[tuple[str, int]]:
    """(split, reported length) of every test split of the run's task."""
    splits = config.task_instance().eval_splits(config.length, 1)
    return {(s.split, s.length or s.batch.tokens.shape[1]) for s in splits}


def evaluate_test_splits(method: str, config: TrainConfig, directory: Path, sequences: int) -> list[dict]:
    """Test-split rows of a run's final checkpoint (``sequences`` per split at the training length), named
    after ``method`` (a kind or a variant)."""
    rows = evaluate_checkpoint(latest_checkpoint(directory), sequences=sequences, device=config.device)
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


def procedural_experiment(name: str, presets, write_report, summary: str, task: str | None = None, **fields):
    """The record of a comparison on procedural task ``task`` (default ``name``): every registered kind,
    learning rates chosen on validation full-sequence accuracy with every fitted value equal, trained to fit
    where the preset says so. ``fields``: other Experiment fields (upgrade, command, suite)."""
    return Experiment(
        name=name,
        task=task or name,
        presets=presets,
        evaluate=evaluate_test_splits,
        validation=validation_rows,
        test_splits=test_splits,
        write_report=write_report,
        selection_metric="full_seq_acc",
        higher_is_better=True,
        fit_accuracy=FIT_ACCURACY,
        summary=summary,
        **fields,
    )
