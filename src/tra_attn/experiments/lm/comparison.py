"""What a language-modelling comparison run evaluates: bits per byte at 1x to 16x the training length on
the end of the validation text, and the last validation at the training length, on windows from the start
of that text, which chooses the learning rates (so the choice never sees the evaluation tokens or the
longer lengths)."""

from __future__ import annotations

from pathlib import Path

from ...training import TrainConfig
from ...training.checkpoint import latest_checkpoint, load_train_state
from ...training.evaluation import result_rows
from ...training.loop import METRICS_NAME
from ...utils.jsonl import read_jsonl
from .evaluate import FACTORS, evaluate_lm

SELECTION_METRIC = "bits_per_byte"


def test_splits(config: TrainConfig) -> set[tuple[str, int]]:
    """Non-overlapping windows at every factor of the training length."""
    return {("non_overlapping", factor * config.length) for factor in FACTORS}


def evaluate_run(method: str, config: TrainConfig, directory: Path, tokens: int | None) -> list[dict]:
    """Rows of a run's final checkpoint on the last ``tokens`` validation tokens (None: all), named after
    ``method``; one position bucket per training length at 16x shows where past the trained span the loss
    moves."""
    rows = evaluate_lm(latest_checkpoint(directory), budget=tokens, buckets=16, device=config.device)
    return [{**r, "method": method, "lr": config.lr} for r in rows]


def validation_rows(method: str, config: TrainConfig, directory: Path) -> list[dict]:
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
    common = {"method": method, "seed": config.seed, "config": config.to_dict()}
    rows = result_rows(metrics, task=config.task, split="validation", length=config.length, **common)
    return [{**r, "lr": config.lr} for r in rows]
