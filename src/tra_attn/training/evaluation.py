"""Evaluation of a trained checkpoint on its task's test splits (or on sequences from a file), as JSONL rows.

Rows follow the results schema ``{task, split, length, method, seed, metric, value, config, commit}``.
"""

from __future__ import annotations

from pathlib import Path

from ..data import check_scored, make_task, recorded_task_args
from ..models import TransformerLM
from ..utils.checks import is_int
from ..utils.provenance import git_commit
from .checkpoint import TRAIN_CONFIG_NAME, load_train_state, resolve_checkpoint
from .config import TrainConfig, check_device


def result_rows(
    metrics: dict, *, task: str, split: str, length: int, method: str, seed, config: dict, **extra
) -> list[dict]:
    """One row per metric: {task, split, length, method, seed, metric, value, **extra, config, commit}."""
    base = {"task": task, "split": split, "length": length, "method": method, "seed": seed}
    return [
        {**base, "metric": name, "value": value, **extra, "config": config, "commit": git_commit()}
        for name, value in metrics.items()
    ]


def evaluate_checkpoint(
    checkpoint,
    data: str | Path | None = None,
    sequences: int = 1000,
    device: str = "cpu",
    length: int | None = None,
    task: str | None = None,
) -> list[dict]:
    """Rows for a checkpoint: its task's standard test splits around its training length, or the
    sequences of a text file (``data``). A model saved with ``save_pretrained`` alone has no training
    config, so it needs ``task`` (and ``length`` unless ``data`` is given). ``task`` naming the run's own
    task keeps the run's task arguments; another task is built with its defaults."""
    check_device(device)
    if length is not None and (not is_int(length) or length <= 0):
        raise ValueError(f"length = {length!r}; expected a positive number of tokens (the training length)")
    if not is_int(sequences) or sequences <= 0:
        raise ValueError(f"sequences = {sequences!r}; expected a positive number of sequences per split")
    path = resolve_checkpoint(checkpoint)
    model = TransformerLM.from_pretrained(path, device=device).eval()
    saved = load_train_state(path)[0] if (path / TRAIN_CONFIG_NAME).is_file() else None
    train_config = TrainConfig.from_dict(saved).to_dict() if saved is not None else {}
    task_name = task or train_config.get("task")
    if task_name is None:
        raise ValueError(f"{path} has no training config to take the task from; pass --task")
    # The run's own task keeps the run's arguments; another task (or a model without a run) takes its defaults.
    own_task = task_name == train_config.get("task")
    the_task = make_task(
        task_name, **(recorded_task_args(task_name, train_config["task_args"], path) if own_task else {})
    )
    length = length or train_config.get("length")
    if data is None and length is None:
        raise ValueError(f"{path} has no training config to take the sequence length from; pass --length")
    if model.config.vocab_size < the_task.vocab_size:
        raise ValueError(
            f"{path}: vocab_size = {model.config.vocab_size}; expected at least the {task_name} "
            f"vocabulary size {the_task.vocab_size}"
        )
    common = {"task": task_name, "method": model.config.attention, "seed": train_config.get("seed")}
    if data is not None and not the_task.has_text_format:
        raise ValueError(f"--data: the {task_name} task has no one-sequence-per-line format; expected no --data")
    if data is not None:
        tests = [(Path(data).stem, batch, batch.tokens.shape[1]) for batch in the_task.read_text(data)]
    else:
        tests = [
            (t.split, t.batch, t.length or t.batch.tokens.shape[1]) for t in the_task.eval_splits(length, sequences)
        ]
    for split, batch, _ in tests:  # every test before any is run: NaN rows help nobody
        check_scored(batch, f"--data {data}" if data is not None else f"the {task_name} {split} split")
    rows = []
    for split, batch, reported_length in tests:
        metrics = the_task.metrics(model, batch.to(device))
        rows += result_rows(metrics, split=split, length=reported_length, config=train_config, **common)
    return rows
