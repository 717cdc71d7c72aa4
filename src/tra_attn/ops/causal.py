"""Causal softmax attention through PyTorch SDPA, with the bottom-right mask a KV cache needs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .logit_dropout import causal_dropout_attention
from .masks import causal_mask, document_mask


def causal_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention with the bottom-right causal mask, through PyTorch SDPA (materialised when
    ``logit_dropout`` > 0: see ops/logit_dropout.py). ``segment_ids`` (B, Sk) of the keys, -1 on padding:
    a query sees only the keys of its own document (``masks.document_mask``)."""
    sq, sk = q.shape[-2], k.shape[-2]
    visible = None if segment_ids is None else document_mask(segment_ids, sq)
    if logit_dropout:
        return causal_dropout_attention(q, k, v, logit_dropout, scale=scale, keep=visible)
    if visible is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale)
    if sq == sk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(sq, sk, q.device), scale=scale)
