"""TRA ablation with the forget gate taken at the key position (FoX-style), materialised.

    logits_ij = s_ij + sum over kept l in [j, i] of log_gate_l      (kept j only)

Each kept key between j and i contributes its own log gate instead of the query's. With a
constant gate this equals TRA exactly. O(Sq * Sk) memory; meant for ablations at moderate length.
"""

from __future__ import annotations

import torch

from ..masks import compute_dtype, dropped_softmax, masked_softmax
from .naive import keep_mask, reverse_cumsum


def tra_key_gate_naive(
    q,
    k,
    v,
    key_log_gate: torch.Tensor,
    scale: float,
    threshold: float,
    logit_dropout: float = 0.0,
    local_window: int = 0,
    sliding_window: int = 0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """q (B,H,Sq,D), k/v (B,H,Sk,D), key_log_gate (B,H,Sk) <= 0; returns (B,H,Sq,D). Optional logit dropout.

    The keep rule is the TRA op's, windows and segment ids (B, Sk) included (``naive.keep_mask``): a key of
    another document or padding is never kept, so its gate enters no sum.

    Computes in fp32 (fp64 for fp64 inputs) under any enclosing autocast, as the TRA op does: the keep
    decision must not be made on bf16-rounded scores in (autocast) training and fp32 ones in evaluation.
    """
    cdt = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
        scores = scale * (qc @ kc.transpose(-1, -2))
        keep = keep_mask(scores, threshold, local_window, sliding_window, segment_ids)
        distance = reverse_cumsum(keep.to(cdt) * key_log_gate.to(cdt)[..., None, :])
        logits = scores + distance
        weights = dropped_softmax(logits, keep, logit_dropout) if logit_dropout else masked_softmax(logits, keep)
        return (weights @ vc).to(q.dtype)
