"""Causal softmax attention through PyTorch SDPA, with the bottom-right mask a KV cache needs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .logit_dropout import causal_dropout_attention
from .masks import causal_mask


def causal_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None, logit_dropout: float = 0.0
) -> torch.Tensor:
    """Softmax attention with the bottom-right causal mask, through PyTorch SDPA (materialised when
    ``logit_dropout`` > 0: see ops/logit_dropout.py)."""
    if logit_dropout:
        return causal_dropout_attention(q, k, v, logit_dropout, scale=scale)
    sq, sk = q.shape[-2], k.shape[-2]
    if sq == sk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(sq, sk, q.device), scale=scale)
