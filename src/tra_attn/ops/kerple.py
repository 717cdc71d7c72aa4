"""KERPLE-log (Chi, Fan, Ramadge, Rudnicky, NeurIPS 2022, arXiv 2205.09921): a conditionally positive definite
kernel of the distance as the bias,

    logits_ij = scale * q_i . k_j - r1_h * log(1 + r2_h * (i - j))   for j <= i,

with r1, r2 > 0 learned per head (the authors' ``ParallelKerpleLog``: bias_p = r1, bias_a = r2).
"""

from __future__ import annotations

import torch

from .relative_bias import bias_attention


def kerple_log_bias(
    r1: torch.Tensor, r2: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor
) -> torch.Tensor:
    """(B|1, H, Sq, Sk) bias -r1 log(1 + r2 (p_i - p_j)) for r1, r2 (H,) and positions (B|1, Sq), (B|1, Sk);
    future keys (negative distances) get distance 0, a finite value that the mask replaces."""
    distance = (query_positions[:, None, :, None] - key_positions[:, None, None, :]).clamp(min=0).to(r1.dtype)
    return -r1[:, None, None] * torch.log1p(r2[:, None, None] * distance)


def kerple_attention(
    q,
    k,
    v,
    r1: torch.Tensor,
    r2: torch.Tensor,
    *,
    positions=None,
    segment_ids=None,
    scale=None,
    logit_dropout: float = 0.0,
    impl: str = "auto",
    chunk: int | None = None,
):
    """Causal KERPLE-log attention for q (B, H, Sq, D), k, v (B, H, Sk, D) and r1, r2 (H,) > 0; positions,
    documents and paths as in ``relative_bias.bias_attention``."""

    def bias(query_positions, key_positions):
        return kerple_log_bias(r1, r2, query_positions, key_positions)

    return bias_attention(
        q, k, v, bias, positions=positions, segment_ids=segment_ids, scale=scale, logit_dropout=logit_dropout,
        impl=impl, chunk=chunk,
    )  # fmt: skip
