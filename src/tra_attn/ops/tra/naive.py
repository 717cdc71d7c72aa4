"""Materialised reference implementation of Threshold Relative Attention (O(Sq * Sk) memory).

Written for clarity, not speed: every fast path is tested against this function. Autograd
provides its backward.
"""

from __future__ import annotations

import torch

from ..masks import causal_mask, compute_dtype, masked_softmax, relative_distance
from ..varlen import segment_mask
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .dropout import LogitDropout


def keep_mask(
    scores: torch.Tensor,
    threshold: float,
    local_window: int = 0,
    sliding_window: int = 0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Key j is kept for query i iff 0 <= d, d < sliding_window (if > 0), and (s_ij > threshold or d < local_window),
    with d = i - j (scores: (..., Sq, Sk)); docs/op_contract.md, section 8. With ``segment_ids`` (B, Sk), also
    only if j is in i's document (neither padding; scores (B, H, Sq, Sk)); section 9."""
    sq, sk = scores.shape[-2:]
    if not (local_window or sliding_window):
        keep = causal_mask(sq, sk, scores.device) & (scores > threshold)
    else:
        d = relative_distance(sq, sk, scores.device)
        keep = ((scores > threshold) | (d < local_window)) & (d >= 0)
        if sliding_window:
            keep = keep & (d < sliding_window)
    return keep if segment_ids is None else keep & segment_mask(segment_ids, sq)


def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """out_ij = sum_{l >= j} x_il along the last dimension."""
    return x.flip(-1).cumsum(-1).flip(-1)


def keep_and_count(
    scores: torch.Tensor,
    threshold: float,
    local_window: int = 0,
    sliding_window: int = 0,
    segment_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep mask and contextual distance c_ij = number of kept keys l with j <= l <= i."""
    keep = keep_mask(scores, threshold, local_window, sliding_window, segment_ids)
    return keep, reverse_cumsum(keep.long())


def tra_naive(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids = NO_AIDS,
) -> torch.Tensor:
    """TRA output for q (B,H,Sq,D), k/v (B,H,Sk,D), log_gate (B,H,Sq); see docs/op_contract.md.

    ``keep`` (threshold, windows) and ``documents`` decide the kept keys (``keep_mask``). Of the ``aids`` it serves
    the logit dropout, as the authors' notebook drops logits in training (ops/logit_dropout.py), with the mask of
    ``aids.dropout_seed`` (``dropout.py``; None: drawn from torch's generator); the op contract is the p = 0
    case. The keep surrogate is ``surrogate.tra_surrogate``'s, refused here.
    """
    aids.refuse("tra_naive", "keep_surrogate", reason="the materialised surrogate gradient is surrogate.tra_surrogate")
    scores, kept, logits = tra_logits(q, k, log_gate, scale, keep.threshold, *keep.windows, documents.ids)
    factors = dropout_factors(aids.logit_dropout, aids.dropout_seed, logits)
    return (softmax_weights(logits, kept, factors) @ v.to(logits.dtype)).to(q.dtype)


def tra_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    log_gate: torch.Tensor,
    scale: float,
    threshold: float,
    local_window: int = 0,
    sliding_window: int = 0,
    segment_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scores s_ij, keep mask, logits s_ij + g_i c_ij), materialised in the compute dtype (``compute_dtype``)."""
    cdt = compute_dtype(q.dtype)
    scores = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
    keep, count = keep_and_count(scores, threshold, local_window, sliding_window, segment_ids)
    return scores, keep, scores + log_gate.to(cdt)[..., None] * count.to(cdt)


def dropout_factors(p: float, seed, logits: torch.Tensor) -> torch.Tensor | None:
    """(B, H, Sq, Sk) multipliers of the logits (B, H, Sq, Sk) under logit dropout p: 0 where the hash of
    ``dropout.py`` drops a logit, 1 / (1 - p) elsewhere; None when p = 0."""
    if not p:
        return None
    b, h, sq, sk = logits.shape
    dropout = LogitDropout(p, seed, b, h, sq, sk, logits.device)
    return dropout.factors(dropout.rows[..., None], dropout.cols, logits.dtype)


def softmax_weights(logits: torch.Tensor, keep: torch.Tensor, factors: torch.Tensor | None) -> torch.Tensor:
    """``masked_softmax``, after the dropout ``factors`` (``dropout_factors``) on the logits: a dropped logit
    becomes 0 and stays in the softmax, a kept one is scaled by 1 / (1 - p) (ops/logit_dropout.py)."""
    if factors is None:
        return masked_softmax(logits, keep)
    return masked_softmax(torch.where(keep, logits, 0.0) * factors, keep)
