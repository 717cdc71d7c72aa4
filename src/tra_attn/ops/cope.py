"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar 2024, arXiv 2405.18719).

    s_ij   = scale * q_i . k_j                      (j <= i)
    g_ij   = sigmoid(s_ij)                          (gate: does key j count as a position step?)
    p_ij   = min(sum_{l=j..i} g_il, npos_max - 1)   (contextual position, a reverse cumulative sum)
    e_ij   = interpolation of the learned logits q_i . E[floor(p_ij)] and q_i . E[ceil(p_ij)]
    logits = s_ij + e_ij, then a causal softmax.

E (D, npos_max) is a learned table shared by the heads of a layer. TRA's count is p_ij with the
sigmoid replaced by the hard step [s_ij > threshold].
"""

from __future__ import annotations

import torch

from .causal import causal_mask


def contextual_positions(gates: torch.Tensor) -> torch.Tensor:
    """p_ij = sum_{l=j..i} gates_il: the reverse cumulative sum over keys (future gates must be 0)."""
    return gates.flip(-1).cumsum(-1).flip(-1)


def interpolated_position_logits(q: torch.Tensor, pos: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of q_i . E[p] between the integer positions around p = pos_ij."""
    table = q @ pos_emb  # (B, H, Sq, npos_max): logits at every integer position
    lo, hi = pos.floor().long(), pos.ceil().long()
    w = pos - lo.to(pos.dtype)
    return table.gather(-1, hi) * w + table.gather(-1, lo) * (1 - w)


def cope_attention(q, k, v, pos_emb: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal CoPE attention for q (B,H,Sq,D), k/v (B,H,Sk,D) and position table pos_emb (D, npos_max)."""
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    visible = causal_mask(sq, sk, q.device)
    scores = scale * (q @ k.transpose(-1, -2))
    gates = torch.sigmoid(scores) * visible
    pos = contextual_positions(gates).clamp(max=pos_emb.shape[-1] - 1)
    logits = scores + interpolated_position_logits(q, pos, pos_emb)
    weights = torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
    return weights @ v
