"""FIRE, functional interpolation for relative positions (Li et al., ICLR 2024, arXiv 2310.04418):

    logits_ij = scale * q_i . k_j + f(psi(i - j) / psi(max(L, i)))_h   for j <= i,   psi(x) = log(|c x| + 1),

with f a small MLP (1 -> width, ReLU, -> one output per head), c learned and the threshold L = |m * L0| learned
through a multiplier m (initialised to 1) of a fixed L0, as in the authors' listing (the paper's appendix; ported
by mcleish7/arithmetic). Dividing by psi(max(L, i)) maps every distance into [0, 1] (progressive interpolation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .relative_bias import bias_attention

EPS = 1e-6  # the authors' eps in the normaliser


def fire_bias(
    query_positions: torch.Tensor,
    key_positions: torch.Tensor,
    c: torch.Tensor,
    threshold: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """(B|1, H, Sq, Sk) bias for positions (B|1, Sq), (B|1, Sk), scalars c and L (``threshold``), and the MLP's
    weights w1 (width, 1), b1 (width,), w2 (H, width), b2 (H,)."""
    pq = query_positions.to(c.dtype)[:, :, None]
    distance = pq - key_positions.to(c.dtype)[:, None, :]
    normaliser = torch.log(torch.abs(c * torch.maximum(pq, threshold)) + 1) + EPS
    x = torch.log(torch.abs(c * distance) + 1) / normaliser
    hidden = F.relu(F.linear(x[..., None], w1, b1))  # (B|1, Sq, Sk, width)
    return F.linear(hidden, w2, b2).permute(0, 3, 1, 2)


def fire_attention(
    q,
    k,
    v,
    c: torch.Tensor,
    threshold: torch.Tensor,
    mlp: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    positions=None,
    segment_ids=None,
    scale=None,
    logit_dropout: float = 0.0,
    impl: str = "auto",
    chunk: int | None = None,
):
    """Causal FIRE attention for q (B, H, Sq, D), k, v (B, H, Sk, D); ``mlp`` = (w1, b1, w2, b2) as in
    ``fire_bias``; positions, documents and paths as in ``relative_bias.bias_attention``."""

    def bias(query_positions, key_positions):
        return fire_bias(query_positions, key_positions, c, threshold, *mlp)

    return bias_attention(
        q, k, v, bias, positions=positions, segment_ids=segment_ids, scale=scale, logit_dropout=logit_dropout,
        impl=impl, chunk=chunk,
    )  # fmt: skip
