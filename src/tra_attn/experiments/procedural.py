"""What a question on a procedural task evaluates: every test split of the task (longer and shifted-density)
from the final checkpoint, and the last validation's full-sequence accuracy, which chooses the learning rates
and decides whether a run fitted. ``procedural_experiment`` makes such a task's record."""

from __future__ import annotations

from pathlib import Path

from ..training import TrainConfig
from ..training.checkpoint import latest_checkpoint, load_train_state
from ..training.evaluation import evaluate_checkpoint
from ..training.loop import METRICS_NAME
from ..utils.jsonl import read_jsonl
from .experiment import Experiment
from .fit import FIT_ACCURACY


def evaluate_test_splits(config: TrainConfig, directory: Path, sequences: int) -> list[dict]:
    """Test-split rows of a run's final checkpoint (``sequences`` per split at the training length)."""
    return evaluate_checkpoint(latest_checkpoint(directory), sequences=sequences, device=config.device)


def validation_rows(config: TrainConfig, directory: Path) -> list[dict]:
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
    return [{"split": "validation", "length": config.length, "metric": m, "value": v} for m, v in metrics.items()]


def procedural_experiment(task: str, presets, section, summary=None) -> Experiment:
    """The record of a procedural task: learning rates chosen on validation full-sequence accuracy with every
    fitted value equal, runs trained to fit where the preset says so, ``section`` its part of a page (``summary``:
    the opening of a page of several such tasks)."""
    return Experiment(
        task=task,
        presets=presets,
        evaluate=evaluate_test_splits,
        validation=validation_rows,
        section=section,
        selection_metric="full_seq_acc",
        higher_is_better=True,
        budget_unit="sequences",
        fit_accuracy=FIT_ACCURACY,
        summary=summary,
    )
