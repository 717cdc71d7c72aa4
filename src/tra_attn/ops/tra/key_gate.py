"""TRA ablation with the forget gate taken at the key position (FoX-style), materialised.

    logits_ij = s_ij + sum over kept l in [j, i] of log_gate_l      (kept j only)

Each kept key between j and i contributes its own log gate instead of the query's. With a
constant gate this equals TRA exactly. O(Sq * Sk) memory; meant for ablations at moderate length.
"""

from __future__ import annotations

import torch

from ..autocast import no_autocast
from ..masks import compute_dtype, dropped_softmax, masked_softmax
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .naive import keep_mask, reverse_cumsum


def tra_key_gate_naive(
    q,
    k,
    v,
    key_log_gate: torch.Tensor,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids = NO_AIDS,
) -> torch.Tensor:
    """q (B,H,Sq,D), k/v (B,H,Sk,D), key_log_gate (B,H,Sk) <= 0; returns (B,H,Sq,D).

    The keep rule is the TRA op's, ``keep`` (threshold, windows) and ``documents`` (``naive.keep_mask``): a key of
    another document or padding is never kept, so its gate enters no sum. Of the ``aids`` it serves the logit
    dropout, with a mask drawn from torch's generator (``ops/logit_dropout.py``, not the op's hash: no
    ``dropout_seed``); the keep surrogate and a seed are refused.

    Computes in fp32 (fp64 for fp64 inputs) under any enclosing autocast, as the TRA op does: the keep
    decision must not be made on bf16-rounded scores in (autocast) training and fp32 ones in evaluation.
    """
    aids.refuse("tra_key_gate_naive", "keep_surrogate", "dropout_seed", reason="its logit dropout is torch's")
    cdt = compute_dtype(q.dtype)
    with no_autocast(q.device):
        qc, kc, vc = q.to(cdt), k.to(cdt), v.to(cdt)
        scores = scale * (qc @ kc.transpose(-1, -2))
        kept = keep_mask(scores, keep.threshold, *keep.windows, documents.ids)
        distance = reverse_cumsum(kept.to(cdt) * key_log_gate.to(cdt)[..., None, :])
        logits = scores + distance
        p = aids.logit_dropout
        weights = dropped_softmax(logits, kept, p) if p else masked_softmax(logits, kept)
        return (weights @ vc).to(q.dtype)
