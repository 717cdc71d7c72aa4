"""What a language-modelling question's run evaluates: bits per byte at 1x to 16x the training length on
the end of the validation text, and the last validation at the training length, on windows from the start
of that text, which chooses the learning rates (so the choice never sees the evaluation tokens or the
longer lengths)."""

from __future__ import annotations

from pathlib import Path

from ...training import TrainConfig
from ...training.checkpoint import latest_checkpoint, load_train_state
from ...training.loop import METRICS_NAME
from ...utils.jsonl import read_jsonl
from .evaluate import evaluate_lm

SELECTION_METRIC = "bits_per_byte"


def evaluate_run(config: TrainConfig, directory: Path, tokens: int | None) -> list[dict]:
    """Rows of a run's final checkpoint on the last ``tokens`` validation tokens (None: all); one position bucket
    per training length at 16x shows where past the trained span the loss moves."""
    return evaluate_lm(latest_checkpoint(directory), budget=tokens, buckets=16, device=config.device)


def validation_rows(config: TrainConfig, directory: Path) -> list[dict]:
    """The run's last validation loss and bits per byte, its training time and throughput."""
    _, state = load_train_state(latest_checkpoint(directory))
    validation = [r for r in read_jsonl(directory / METRICS_NAME) if "val_loss" in r][-1]
    seconds = state["train_seconds"]
    metrics = {
        "loss": validation["val_loss"],
        SELECTION_METRIC: validation[f"val_{SELECTION_METRIC}"],
        "train_seconds": seconds,
        "tokens_per_second": config.steps * config.batch_size * config.length / seconds,
    }
    return [{"split": "validation", "length": config.length, "metric": m, "value": v} for m, v in metrics.items()]
