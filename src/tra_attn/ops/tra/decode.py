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
from .nonfinite import poison

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
    training aids (decoding has none); a query with no kept key outputs 0. Finite inputs (``nonfinite.sanitize``)."""
    return _rows(q, k, v, log_gate, scale, keep, documents)[0].to(q.dtype)


def checks_itself(q: torch.Tensor, documents: Documents) -> bool:
    """Whether ``tra_decode_unsanitized`` serves the call: one query per row, which sees every key (no documents)."""
    return q.shape[2] == 1 and documents.ids is None


def tra_decode_unsanitized(q, k, v, log_gate, *, scale: float, keep: KeepRule) -> torch.Tensor:
    """``tra_decode`` for one query per row and no documents, on inputs that may hold NaN or infinities: the op's
    non-finite contract (nonfinite.py) from the row's own quantities instead of a pass over the whole cache.

    The query sees every key, so its row is NaN iff q, its gate or any k_j or v_j has a non-finite entry: a bad q
    or k_j makes a score non-finite (a product with an infinity or a NaN), so the keys need no pass of their own;
    v is checked by one sum per head (a zero weight need not carry a NaN through a BLAS product) and the gate
    itself. Finite rows are computed from finite inputs alone, bit for bit what the sanitised call computes. (A
    finite score that overflows counts as bad, as it would make every implementation's row NaN; so does a head
    whose values sum past the largest float, about 1e38 in fp32.)"""
    out, scores = _rows(q, k, v, log_gate, scale, keep, NO_DOCUMENTS)
    finite_values = torch.isfinite(v.sum((-2, -1), dtype=compute_dtype(v.dtype)))[..., None]  # (B, H, 1)
    poisoned = ~(torch.isfinite(scores).all(-1) & finite_values & torch.isfinite(log_gate))
    return poison(out, poisoned).to(q.dtype)


def _rows(q, k, v, log_gate, scale: float, keep: KeepRule, documents: Documents):
    """(output, scores) in the compute dtype."""
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
    return out, scores
