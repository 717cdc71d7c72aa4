"""Causal masks for queries that sit at the last Sq of Sk positions (prefill: Sq = Sk; decoding: Sq < Sk)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


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


def causal_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None, logit_dropout: float = 0.0
) -> torch.Tensor:
    """Softmax attention with the bottom-right causal mask, through PyTorch SDPA (materialised when
    ``logit_dropout`` > 0: see ops/logit_dropout.py)."""
    if logit_dropout:
        from .logit_dropout import causal_dropout_attention  # imports this module

        return causal_dropout_attention(q, k, v, logit_dropout, scale=scale)
    sq, sk = q.shape[-2], k.shape[-2]
    if sq == sk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(sq, sk, q.device), scale=scale)
