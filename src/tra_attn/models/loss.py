"""Next-token cross-entropy computed by the model from its final hidden states, in chunks of tokens.

The (tokens, vocab) fp32 logits are never built for the whole batch: with a 50k vocabulary a 16k-token
evaluation would need 3.3 GB for them. Chunks are sized so each holds at most ``LOGIT_ELEMENTS``
logits; under autograd each chunk is recomputed in the backward (activation checkpointing), so
training memory is bounded the same way.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100  # labels with this value are not scored (per-token loss 0)
LOGIT_ELEMENTS = 1 << 24  # fp32 logits per chunk: 64 MB


def _chunk_loss(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float()
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="none")


def outside_documents(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) bool: the labels a packed or padded batch ignores. Label i is the target of position i, the token
    at i + 1: ignored where position i is padding (id < 0) or the token at i + 1 is padding or in another
    document. The row's last label targets a token past the row, whose document the data decided."""
    crossing = F.pad(segment_ids[:, 1:] != segment_ids[:, :-1], (0, 1), value=False)
    return (segment_ids < 0) | crossing


def token_cross_entropy(
    hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor, segment_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token loss (B, S) in fp32 of ``head(hidden)`` against ``labels`` (B, S); 0 where ignored (label
    IGNORE_INDEX, or, with ``segment_ids`` (B, S), ``outside_documents``)."""
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(
            f"TransformerLM: labels.shape = {tuple(labels.shape)}; expected {tuple(hidden.shape[:-1])} "
            f"(one label per input position, {IGNORE_INDEX} where unscored)"
        )
    if segment_ids is not None:
        labels = labels.masked_fill(outside_documents(segment_ids), IGNORE_INDEX)
    flat_hidden, flat_labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    chunk = max(1, LOGIT_ELEMENTS // head.out_features)
    if flat_labels.numel() <= chunk:
        return _chunk_loss(flat_hidden, head, flat_labels).view(labels.shape)
    recompute = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for start in range(0, flat_labels.numel(), chunk):
        h, y = flat_hidden[start : start + chunk], flat_labels[start : start + chunk]
        parts.append(checkpoint(_chunk_loss, h, head, y, use_reentrant=False) if recompute else _chunk_loss(h, head, y))
    return torch.cat(parts).view(labels.shape)
