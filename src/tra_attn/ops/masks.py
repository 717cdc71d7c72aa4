"""Causal masks and masked softmaxes shared by every attention op (a leaf: imports nothing from the package).

Queries sit at the last Sq of Sk positions (prefill: Sq = Sk; decoding: Sq < Sk), so the causal mask is
aligned bottom-right. The softmaxes run over a boolean ``keep`` mask (causal, and for TRA thresholded) and
give rows with no kept entry all-zero weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: fp64 for fp64 inputs, fp32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def query_positions(sq: int, sk: int, device=None) -> torch.Tensor:
    """Absolute positions Sk - Sq, ..., Sk - 1 of the Sq queries."""
    return torch.arange(sk - sq, sk, device=device)


def causal_mask(sq: int, sk: int, device=None) -> torch.Tensor:
    """Boolean (Sq, Sk) mask, True where key j is visible to query r (j <= Sk - Sq + r).

    Unlike SDPA's ``is_causal``, which aligns the mask top-left, this aligns it bottom-right, as a
    KV cache needs.
    """
    return torch.arange(sk, device=device)[None, :] <= query_positions(sq, sk, device)[:, None]


def relative_distance(sq: int, sk: int, device=None) -> torch.Tensor:
    """(Sq, Sk) integer distance i - j between query position i and key position j."""
    return query_positions(sq, sk, device)[:, None] - torch.arange(sk, device=device)[None, :]


def masked_softmax(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Softmax over kept entries; rows with no kept entry get all-zero weights (and zero gradient)."""
    has_key = keep.any(-1, keepdim=True)
    masked = torch.where(keep, logits, float("-inf"))
    # Rows with no kept key would softmax to NaN: give them finite logits, then zero their weights.
    return torch.softmax(torch.where(has_key, masked, 0.0), dim=-1) * keep


def dropped_softmax(logits: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Softmax weights over the kept entries of ``logits`` after dropout p on the logits (ops/logit_dropout.py).

    Entries outside ``keep`` are set to 0 first (a -inf bias times a dropout mask of 0 would be NaN);
    rows with no kept entry get zero weights, as in TRA.
    """
    logits = F.dropout(torch.where(keep, logits, 0.0), p, training=True)
    return masked_softmax(logits, keep)
