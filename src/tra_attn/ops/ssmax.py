"""Scalable-Softmax attention, SSMax (Nakanishi 2025, arXiv 2501.19399).

    out_i = sum_{j visible} n_i^(s_h z_ij) v_j / sum_{l visible} n_i^(s_h z_il),   z_ij = scale * q_i . k_j
          = softmax_j(s_h log(n_i) z_ij)

with a learned factor s_h per head and n_i the number of keys query i sees (i + 1 in a causal model, counted
within its document in a packed or padded batch: ``rows.key_counts``). The factor s_h log(n_i) depends on the
query only, so it is folded into q and PyTorch SDPA runs the rest in O(S) memory (``ssmax_attention``);
``ssmax_reference`` writes the formula out on the materialised logits.
"""

from __future__ import annotations

import torch

from .causal import causal_sdpa
from .masks import compute_dtype, masked_softmax
from .rows import visible_keys


def ssmax_query_scale(s: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """(B or 1, H, Sq) factor s_h log(n_i) of per-head ``s`` (H,) and key counts ``n`` (B or 1, Sq)."""
    return s[None, :, None] * torch.log(n.to(s.dtype))[:, None, :]


def ssmax_attention(q, k, v, s, n, logit_dropout: float = 0.0, segment_ids=None) -> torch.Tensor:
    """SSMax through SDPA: q scaled per query by s_h log(n_i), then causal softmax attention (``causal_sdpa``)."""
    factor = ssmax_query_scale(s.to(compute_dtype(q.dtype)), n)
    return causal_sdpa(q * factor[..., None].to(q.dtype), k, v, logit_dropout=logit_dropout, segment_ids=segment_ids)


def ssmax_reference(q, k, v, s, n, segment_ids=None) -> torch.Tensor:
    """The materialised formula: softmax over visible keys of log(n_i) s_h z_ij, accumulated in fp32/fp64."""
    cdt = compute_dtype(q.dtype)
    z = (q.to(cdt) @ k.to(cdt).transpose(-1, -2)) * q.shape[-1] ** -0.5
    logits = z * ssmax_query_scale(s.to(cdt), n)[..., None]
    visible = visible_keys(q.shape[-2], k.shape[-2], segment_ids, q.device)
    return (masked_softmax(logits, visible) @ v.to(cdt)).to(q.dtype)
