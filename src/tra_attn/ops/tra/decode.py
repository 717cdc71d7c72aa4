"""TRA for a few queries against a long key cache without gradients (decoding with a KV cache), on any device.

Decoding asks for one query row (a few, with speculative or chunked steps) against every cached key: the row is
O(Sk) whatever the implementation, so the fastest exact path materialises it. The keep rule is
``naive.keep_mask`` (the one rule every implementation decides by); what differs from the reference is only how
few passes over the row it takes: the count of kept keys in [j, i] is the row's total minus an inclusive prefix
sum plus the key's own bit (one scan, where the reference flips twice), and the softmax is an in-place exp of the
kept logits against their maximum, clamped above exp's slow path (denormals.py). The chunked path serves
everything else: its strips of keys cost a dozen passes per strip, which a single row never amortises.
"""

from __future__ import annotations

import math

import torch

from ..masks import compute_dtype
from .contract import NO_DOCUMENTS, Documents, KeepRule
from .denormals import EXP_FLOOR
from .naive import keep_mask

DECODE_MAX_QUERIES = 16  # rows of (Sq, Sk) materialised at once: O(Sk) memory for a decoding step


def decodes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_gate: torch.Tensor) -> bool:
    """A decoding call: at most ``DECODE_MAX_QUERIES`` queries and no gradient to compute."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, log_gate))
    return q.shape[2] <= DECODE_MAX_QUERIES and not needs_grad


def tra_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
) -> torch.Tensor:
    """TRA output (B, H, Sq, D) of q (B, H, Sq, D) against k, v (B, H, Sk, D), as ``naive.tra_naive`` without
    training aids (decoding has none); a query with no kept key outputs 0."""
    cdt = compute_dtype(q.dtype)
    scores = torch.matmul(q.to(cdt), k.to(cdt).transpose(-1, -2)).mul_(scale)
    kept = keep_mask(scores, keep.threshold, *keep.windows, documents.ids)
    bits = kept.to(torch.int32)
    # Kept keys in [j, i] (none after i is kept): the row's total, less those before j.
    count = bits.sum(-1, keepdim=True) - bits.cumsum(-1, dtype=torch.int32) + bits
    logits = torch.addcmul(scores, log_gate.to(cdt)[..., None], count.to(cdt)).masked_fill_(~kept, -math.inf)
    top = logits.amax(-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, 0.0)  # a row with no kept key: every weight is 0
    # exp's slow path below the floor (denormals.py) is never taken: clamp, then zero the dropped keys.
    weights = logits.sub_(top).clamp_(min=EXP_FLOOR[cdt]).exp_().masked_fill_(~kept, 0.0)
    total = weights.sum(-1, keepdim=True)
    out = torch.matmul(weights, v.to(cdt)).div_(torch.where(total > 0, total, 1.0))
    return out.to(q.dtype)
