"""Accuracy on tasks whose sequences mark the tokens that are scored (a loss mask).

A sequence counts as correct only if every scored token is predicted correctly by argmax; sequences
without any scored token are left out of that metric. Metric names:

- ``full_seq_acc``: fraction of sequences with every scored token right;
- ``token_acc``: fraction of scored tokens right; ``loss``: mean cross-entropy over them;
- ``sequences``, ``scored_tokens``: how many of each were scored;
- ``item_acc`` (only when the caller groups the scored tokens into answer items, ``items``): the mean over
  sequences of the fraction of their items with every token right. For a task whose answer is a list of
  references (the values of a needle, the words of a list) this is the fraction of references found, scored
  by argmax given the true prefix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers import attention_kind
from ..models import ModelConfig, TransformerLM

TOKENS_PER_BATCH = 16384
# Kinds that materialise (B, H, S, S) tensors (CoPE, FoX, ALiBi, the key-gate ablation) keep them at
# 16 MB or less: on CPU, larger allocations are fresh mmaps whose page faults cost more than the math.
SCORES_PER_BATCH = 1 << 22


def eval_batch_size(config: ModelConfig, length: int) -> int:
    """Sequences per evaluation forward: a token budget, and a score budget for materialising kinds."""
    batch = TOKENS_PER_BATCH // length
    if attention_kind(config.attention).materializes(config.attention_options):
        batch = min(batch, SCORES_PER_BATCH // (config.n_heads * length * length))
    return max(1, batch)


@torch.no_grad()
def sequence_metrics(
    model: TransformerLM,
    tokens: torch.Tensor,
    loss_mask: torch.Tensor,
    items: torch.Tensor | None = None,
    targets: torch.Tensor | None = None,
) -> dict:
    """Full-sequence accuracy, per-token accuracy and mean loss over the scored tokens (next-token prediction).

    ``items`` (N, L) integers, optional: the answer item (0, 1, ...) each scored token belongs to (any value at the
    other tokens); with it the metrics add ``item_acc``. ``targets`` (N, L), optional: what the prediction at
    position j is scored against at j + 1 in place of the next token (``TaskBatch.targets``).
    """
    n, length = tokens.shape
    batch = eval_batch_size(model.config, length)
    seq_correct = seq_scored = tokens_correct = scored_tokens = 0
    loss_sum = item_sum = 0.0
    for i in range(0, n, batch):
        x, m = tokens[i : i + batch], loss_mask[i : i + batch, 1:]
        logits = model(x[:, :-1]).float()
        target = (x if targets is None else targets[i : i + batch])[:, 1:]
        correct = (logits.argmax(-1) == target) & m
        per_seq = m.sum(1)
        scored = per_seq > 0
        seq_correct += int(((correct.sum(1) == per_seq) & scored).sum())
        seq_scored += int(scored.sum())
        tokens_correct += int(correct.sum())
        scored_tokens += int(m.sum())
        loss_sum += F.cross_entropy(logits[m], target[m], reduction="sum").item() if m.any() else 0.0
        if items is not None and m.any():
            item_sum += float(item_fractions(items[i : i + batch, 1:].to(m.device), m, correct).sum())
    found = {"item_acc": item_sum / seq_scored if seq_scored else float("nan")} if items is not None else {}
    return {
        "full_seq_acc": seq_correct / seq_scored if seq_scored else float("nan"),
        "token_acc": tokens_correct / scored_tokens if scored_tokens else float("nan"),
        "loss": loss_sum / scored_tokens if scored_tokens else float("nan"),
        "sequences": seq_scored,
        "scored_tokens": scored_tokens,
        **found,
    }


def item_fractions(items: torch.Tensor, scored: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """Per sequence with a scored token, the fraction of its items (``items`` at the ``scored`` positions) whose
    every scored token is ``correct``; all three (N, L)."""
    index = torch.where(scored, items, 0).long()
    width = int(index.max()) + 1
    present = torch.zeros(index.shape[0], width, dtype=torch.long, device=index.device)
    present.scatter_reduce_(1, index, scored.long(), reduce="amax")
    wrong = torch.zeros_like(present).scatter_reduce_(1, index, (scored & ~correct).long(), reduce="amax")
    total = present.sum(1)
    keep = total > 0
    return (present - wrong).clamp(min=0).sum(1)[keep].double() / total[keep]
