"""Evaluation: full-sequence and per-read accuracy on flip-flop splits, as JSONL result rows.

A sequence counts as correct only if every scored token (every bit after a read) is predicted
correctly by argmax; sequences without any scored token are left out of that metric.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from .checkpoint import TRAIN_CONFIG_NAME, load_train_state, resolve_checkpoint
from .model import TransformerLM
from .tasks.flipflop import FlipFlop, TaskBatch, read_text
from .utils.provenance import git_commit

TEST_SEED = 3_000_000_000  # test sets are shared by every method and seed
TOKENS_PER_BATCH = 16384
# Materialised (B, H, S, S) score tensors (CoPE, the key-gate ablation) stay at 16 MB or less: on CPU,
# larger allocations are fresh mmaps whose page faults cost more than the arithmetic.
SCORES_PER_BATCH = 1 << 22


def eval_batch_size(length: int, n_heads: int) -> int:
    return max(1, min(TOKENS_PER_BATCH // length, SCORES_PER_BATCH // (n_heads * length * length)))


def split_sequences(sequences: int, train_length: int, length: int) -> int:
    """Sequences for a split: ``sequences`` at the training length, the same token budget beyond it."""
    return max(1, sequences * train_length // max(length, train_length))


def flipflop_splits(length: int) -> list[tuple[str, float, int]]:
    """(split, p_ignore, length) of the test sets for a model trained on ``length``-token FFL(0.8).

    IID FFL(0.8), sparse FFL(0.98) and dense FFL(0.1) at the training length, IID at 2x, 4x and 8x,
    and sparse at 8x, where write-to-read gaps run far beyond anything seen in training. New splits
    go at the end, so that every split keeps its seed.
    """
    return (
        [("iid", 0.8, length), ("sparse", 0.98, length), ("dense", 0.1, length)]
        + [("iid", 0.8, factor * length) for factor in (2, 4, 8)]
        + [("sparse", 0.98, 8 * length)]
    )


def flipflop_test_sets(train_length: int, sequences: int) -> list[tuple[str, float, TaskBatch]]:
    """(split, p_ignore, batch) for every split; each ends with a read, seeds shared by all runs."""
    return [
        (
            split,
            p,
            FlipFlop(p, final_read=True).sample(
                split_sequences(sequences, train_length, length), length, TEST_SEED + index
            ),
        )
        for index, (split, p, length) in enumerate(flipflop_splits(train_length))
    ]


@torch.no_grad()
def sequence_metrics(model: TransformerLM, tokens: torch.Tensor, loss_mask: torch.Tensor) -> dict:
    """Full-sequence accuracy, per-read accuracy and mean loss over the scored tokens."""
    n, length = tokens.shape
    batch = eval_batch_size(length, model.config.n_heads)
    seq_correct = seq_scored = reads_correct = reads = 0
    loss_sum = 0.0
    for i in range(0, n, batch):
        x, m = tokens[i : i + batch], loss_mask[i : i + batch, 1:]
        logits = model(x[:, :-1]).float()
        target = x[:, 1:]
        correct = (logits.argmax(-1) == target) & m
        per_seq_reads = m.sum(1)
        scored = per_seq_reads > 0
        seq_correct += int(((correct.sum(1) == per_seq_reads) & scored).sum())
        seq_scored += int(scored.sum())
        reads_correct += int(correct.sum())
        reads += int(m.sum())
        loss_sum += F.cross_entropy(logits[m], target[m], reduction="sum").item() if m.any() else 0.0
    return {
        "full_seq_acc": seq_correct / seq_scored if seq_scored else float("nan"),
        "read_acc": reads_correct / reads if reads else float("nan"),
        "loss": loss_sum / reads if reads else float("nan"),
        "sequences": seq_scored,
        "reads": reads,
    }


def result_rows(metrics: dict, *, split: str, length: int, method: str, seed, config: dict, **extra) -> list[dict]:
    """One row per metric: {task, split, length, method, seed, metric, value, config, commit, **extra}."""
    base = {"task": "flipflop", "split": split, "length": length, "method": method, "seed": seed}
    return [
        {**base, "metric": name, "value": value, **extra, "config": config, "commit": git_commit()}
        for name, value in metrics.items()
    ]


def evaluate_checkpoint(
    checkpoint, data: str | Path | None = None, sequences: int = 1000, device: str = "cpu", length: int | None = None
) -> list[dict]:
    """Rows for a checkpoint: the standard flip-flop splits around its training length (or ``length``,
    for a model saved with ``save_pretrained`` alone), or the sequences of a text file."""
    path = resolve_checkpoint(checkpoint)
    model = TransformerLM.from_pretrained(path, device=device).eval()
    train_config = load_train_state(path)[0] if (path / TRAIN_CONFIG_NAME).is_file() else {}
    length = length or train_config.get("length")
    if data is None and length is None:
        raise ValueError(f"{path} has no training config to take the sequence length from; pass --length")
    common = {"method": model.config.attention, "seed": train_config.get("seed"), "config": train_config}
    if data is not None:
        batches = [(Path(data).stem, batch) for batch in read_text(data)]
    else:
        batches = [(split, batch) for split, _, batch in flipflop_test_sets(length, sequences)]
    rows = []
    for split, batch in batches:
        metrics = sequence_metrics(model, batch.tokens.to(device), batch.loss_mask.to(device))
        rows += result_rows(metrics, split=split, length=batch.tokens.shape[1], **common)
    return rows
