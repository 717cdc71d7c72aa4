"""TRA with a training-time surrogate gradient for the keep decision (materialised, O(Sq * Sk) memory).

The exact op gives a key below the threshold no gradient: the keep mask and the count are piecewise
constant. Here the forward pass is exact TRA, bit for bit, while the backward treats the keep bit as a
continuous weight m_ij in [0, 1]:

    c_ij  = sum_{l=j..i} m_il,      z_ij = s_ij + g_i c_ij
    out_i = sum_j m_ij exp(z_ij) v_j / sum_j m_ij exp(z_ij)          (0 for a row with no kept key)

which is TRA when m is the hard keep mask, with dm_ij/ds_ij = sigmoid'((s_ij - threshold) / tau) / tau
(a sigmoid-relaxed straight-through estimator). A key near the threshold, kept or not, then gets gradient
through the attention mass it would take or give up and through the counts of the keys to its left.
See docs/op_contract.md, section 5 ("Keep surrogate").
"""

from __future__ import annotations

import math

import torch

from ..masks import relative_distance
from ..varlen import segment_mask
from .contract import NO_DOCUMENTS, Documents, KeepRule, TrainingAids, fail, typed_repr
from .naive import dropout_factors, reverse_cumsum, softmax_weights, tra_logits


def tra_surrogate(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids,
) -> torch.Tensor:
    """``tra_naive``'s output (and its gradient) plus the surrogate gradient of temperature
    ``aids.keep_surrogate`` = tau > 0.

    The output is exact + (relaxed - relaxed.detach()): the same values as ``tra_naive`` (x - x is 0 for
    the finite ``relaxed``), the exact gradient, and the derivative of the relaxed form with respect to m
    chained through the sigmoid into q and k. ``aids.logit_dropout`` > 0 drops the logits as ``tra_naive``
    does (the mask of ``aids.dropout_seed``), and the relaxed form sees the same dropped logits. The windows
    of ``keep`` and the ``documents`` change the keep rule as in ``tra_naive``; a key kept by the local window,
    or outside the sliding window or the query's document, has no keep decision to relax (its m is constant).
    """
    tau = aids.keep_surrogate
    if not tau:
        fail(
            "aids.keep_surrogate",
            typed_repr(tau),
            "a temperature > 0 (0 is the exact op: tra_naive)",
            who="tra_surrogate",
        )
    local_window, sliding_window = keep.windows
    segment_ids = documents.ids
    scores, kept, logits = tra_logits(q, k, log_gate, scale, keep.threshold, local_window, sliding_window, segment_ids)
    cdt = logits.dtype
    vc, gc = v.to(cdt), log_gate.to(cdt)
    drop = dropout_factors(aids.logit_dropout, aids.dropout_seed, logits)
    exact = softmax_weights(logits, kept, drop) @ vc
    # Where the rule does not compare the score (non-causal, outside the sliding window or the document, inside
    # the local window) m is the constant keep bit.
    decided = decided_by_score(scores, local_window, sliding_window, segment_ids)
    soft = torch.where(decided, torch.sigmoid((scores - keep.threshold) / tau), kept.to(cdt))
    relaxed = relaxed_attention(scores.detach(), gc.detach(), vc.detach(), kept, soft, drop)
    return (exact + (relaxed - relaxed.detach())).to(q.dtype)


def decided_by_score(
    scores: torch.Tensor, local_window: int, sliding_window: int, segment_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """(Sq, Sk) True where the keep rule compares the score with the threshold: causal keys inside the
    sliding window (if any) and beyond the local window; with ``segment_ids`` (B, Sk), (B, 1, Sq, Sk) and
    only keys in the query's document."""
    d = relative_distance(*scores.shape[-2:], scores.device)
    decided = (d >= 0) & (d >= local_window)
    if sliding_window:
        decided = decided & (d < sliding_window)
    return decided if segment_ids is None else decided & segment_mask(segment_ids, scores.shape[-2])


def relaxed_attention(scores, log_gate, v, keep, soft, drop=None) -> torch.Tensor:
    """The continuous form at m = keep + (soft - soft.detach()): the value of exact TRA, the derivative in m.

    Only ``soft`` carries gradient (the caller detaches the rest). The softmax is shifted by the row's
    largest kept logit, so kept weights are at most 1 and a row with a kept key sums to at least 1. A dropped
    key's weight relative to the kept ones is at most exp(|g_i|) without dropout (it scores below every kept
    key and sits at most one count nearer); the shift is capped at half the dtype's largest exponent so that
    extreme gates still give finite gradients. Rows with no kept key output 0 and pass no gradient: the
    relaxation's derivative there is 0 / 0.
    """
    m = keep.to(soft.dtype) + (soft - soft.detach())
    logits = scores + log_gate[..., None] * reverse_cumsum(m)
    if drop is not None:
        logits = logits * drop
    has_key = keep.any(-1, keepdim=True)
    top = torch.where(keep, logits, float("-inf")).amax(-1, keepdim=True).detach()
    cap = math.log(torch.finfo(logits.dtype).max) / 2
    weights = m * torch.exp((logits - torch.where(has_key, top, 0.0)).clamp(max=cap))
    total = weights.sum(-1, keepdim=True)
    return torch.where(has_key, (weights @ v) / torch.where(has_key, total, 1.0), 0.0)
