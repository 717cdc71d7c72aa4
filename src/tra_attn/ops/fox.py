"""Forgetting Attention, the core of the Forgetting Transformer (Lin et al., ICLR 2025, arXiv 2503.02130).

    logits_ij = scale * q_i . k_j + sum_{l=j+1..i} log f_l   for j <= i,

with a per-head, per-position forget gate f_l = sigmoid(w . x_l + b) in (0, 1) taken at the
intermediate (key/time-step) positions. With L = cumsum(log f) the bias is L_i - L_j.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .logit_dropout import causal_dropout_attention
from .masks import causal_mask, compute_dtype


def forgetting_bias(log_lambda: torch.Tensor, sq: int) -> torch.Tensor:
    """(B, H, Sq, Sk) bias L_i - L_j (-inf on future keys) from cumulative log gates L (B, H, Sk)."""
    sk = log_lambda.shape[-1]
    bias = log_lambda[..., sk - sq :, None] - log_lambda[..., None, :]
    return bias.masked_fill(~causal_mask(sq, sk, log_lambda.device), float("-inf"))


def forgetting_attention(
    q, k, v, log_fgate: torch.Tensor, scale: float | None = None, logit_dropout: float = 0.0
) -> torch.Tensor:
    """Causal forgetting attention; log_fgate (B, H, Sk) <= 0 holds log f for every key position.

    The cumulative sum is taken in fp32 (fp64 for fp64 inputs), as the FoX kernels do. With
    ``logit_dropout`` > 0 the logits are materialised and dropped (ops/logit_dropout.py).
    """
    log_lambda = torch.cumsum(log_fgate.to(compute_dtype(q.dtype)), dim=-1)
    if logit_dropout:
        return causal_dropout_attention(q, k, v, logit_dropout, forgetting_bias(log_lambda, q.shape[-2]), scale)
    bias = forgetting_bias(log_lambda, q.shape[-2]).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
