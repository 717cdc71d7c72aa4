"""Selective attention (Leviathan, Kalman, Matias, ICLR 2025, arXiv 2410.02703): tokens mask later tokens' view of
earlier ones, with no parameters.

Section 3 of the paper ("Selective Attention"), with C = QK^T / sqrt(D) the causal attention logits and positions
counted from 0:

    S       = ReLU(C^0)                    head 0's logits, only positive selection
    S_k,0   = 0                            the first token (<BOS>) is never masked
    S_k,k   = 0                            a token does not mask itself
    F_i,j   = sum_{k < i} S_k,j            masking strictly in the future: query i sees the selections of earlier
                                           queries k (so F_i,j = sum_{j < k < i} ReLU(C^0_k,j) for j > 0)
    out     = softmax(C - F) V             F subtracted from the logits of every head (head 0's too)

as lucidrains/x-transformers computes it (``x_transformers/attend.py``, ``selective_attn``, at commit
9252ed7838021ee61e6c5be0930b3a9a88efdf06; the paper has no official code). In a packed or padded batch the sums run
over the query's own document (only a key's document selects it), and "first token" is each document's first.

``selective_attention`` materialises (B, H, Sq, Sk). It takes the selections already accumulated on every key by
earlier queries (a KV cache's) and returns those the new queries add, so decoding continues F exactly. Logit
dropout drops the final logits C - F (ops/logit_dropout.py); F itself is computed from the undropped head-0 logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .masks import compute_dtype, document_positions, dropped_softmax, masked_softmax, relative_distance
from .rows import visible_keys


def selections(head0: torch.Tensor, visible: torch.Tensor, segment_ids: torch.Tensor | None) -> torch.Tensor:
    """S (B, Sq, Sk) of head 0's logits (B, Sq, Sk): ReLU on visible keys, 0 on the diagonal (a token does not
    mask itself) and on each document's first token (never masked)."""
    sq, sk = head0.shape[-2:]
    own = relative_distance(sq, sk, head0.device) == 0
    if segment_ids is None:
        first = torch.arange(sk, device=head0.device) == 0
    else:
        first = (document_positions(segment_ids) == 0)[:, None, :]
    keep = visible.reshape(-1, sq, sk) if visible.dim() == 4 else visible
    return torch.where(keep & ~own & ~first, F.relu(head0), 0.0)


def selective_attention(
    q,
    k,
    v,
    selected: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
):
    """Selective attention of q (B, H, Sq, D), k/v (B, H, Sk, D), Sq <= Sk (the queries are the last Sq keys):
    (out (B, H, Sq, D), added (B, Sk)).

    ``selected`` (B, Sk): sum_k S_k,j over the queries before these (the cached ones; None: none), so
    F_i,j = selected_j + sum_{k < i among these} S_k,j; ``added``: sum_k S_k,j over these queries, what a cache
    adds to ``selected``. ``segment_ids`` (B, Sk) of the keys, -1 on padding. Accumulates in fp32 (fp64 for fp64
    inputs), also under an enclosing autocast, and returns q's dtype (``added`` in the accumulation dtype)."""
    cdt = compute_dtype(q.dtype)
    sq, sk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with no_autocast(q.device):
        visible = visible_keys(sq, sk, segment_ids, q.device)
        logits = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
        s = selections(logits[:, 0], visible, segment_ids)
        masking = F.pad(s, (0, 0, 1, 0))[..., :-1, :].cumsum(-2)  # row i: sum over the rows k < i
        if selected is not None:
            masking = masking + selected.to(cdt)[:, None, :]
        logits = logits - masking[:, None]
        drop = logit_dropout > 0
        weights = dropped_softmax(logits, visible, logit_dropout) if drop else masked_softmax(logits, visible)
        return (weights @ v.to(cdt)).to(q.dtype), s.sum(-2)
