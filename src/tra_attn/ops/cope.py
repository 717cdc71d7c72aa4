"""CoPE: contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar 2024, arXiv 2405.18719).

    s_ij   = scale * q_i . k_j                      (j <= i)
    g_ij   = sigmoid(s_ij)                          (gate: does key j count as a position step?)
    p_ij   = min(sum_{l=j..i} g_il, npos_max - 1)   (contextual position, a reverse cumulative sum)
    e_ij   = interpolation of the learned logits q_i . E[floor(p_ij)] and q_i . E[ceil(p_ij)]
    logits = s_ij + e_ij, then a causal softmax.

E (D, npos_max) is a learned table shared by the heads of a layer. TRA's count is p_ij with the
sigmoid replaced by the hard step [s_ij > threshold].

In a packed or padded batch (``segment_ids``) the gates of keys outside the query's document (and of
padding) are 0, so they add nothing to p_ij, and those keys are masked: each document counts alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .masks import causal_mask, document_mask, dropped_softmax


def contextual_positions(gates: torch.Tensor) -> torch.Tensor:
    """p_ij = sum_{l=j..i} gates_il: the reverse cumulative sum over keys (future gates must be 0).

    Written as total - prefix + own gate, which avoids two flipped copies of an (Sq, Sk) tensor.
    """
    prefix = gates.cumsum(-1)
    return prefix[..., -1:] - prefix + gates


def interpolated_position_logits(q: torch.Tensor, pos: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of q_i . E[p] between the integer positions floor(p) and floor(p) + 1.

    Equals CoPE's ``w * logits[ceil(p)] + (1 - w) * logits[floor(p)]`` with w = p - floor(p), using a
    single index tensor: logits[floor] + w * (logits[floor + 1] - logits[floor]).
    """
    table = q @ pos_emb  # (B, H, Sq, npos_max): logits at every integer position
    step = F.pad(table[..., 1:] - table[..., :-1], (0, 1))  # 0 after the last position
    low = pos.detach().floor()
    index = low.long()
    return table.gather(-1, index) + (pos - low) * step.gather(-1, index)


def cope_attention(
    q,
    k,
    v,
    pos_emb: torch.Tensor,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal CoPE attention for q (B,H,Sq,D), k/v (B,H,Sk,D) and position table pos_emb (D, npos_max);
    optional dropout on the logits (ops/logit_dropout.py); ``segment_ids`` (B, Sk) of the keys (-1: padding)
    for packed or padded batches."""
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = d**-0.5 if scale is None else scale
    visible = causal_mask(sq, sk, q.device) if segment_ids is None else document_mask(segment_ids, sq)
    scores = (q * scale) @ k.transpose(-1, -2)
    gates = torch.sigmoid(scores) * visible
    pos = contextual_positions(gates).clamp(max=pos_emb.shape[-1] - 1)
    logits = scores + interpolated_position_logits(q, pos, pos_emb)
    if logit_dropout:
        return dropped_softmax(logits, visible, logit_dropout).to(v.dtype) @ v
    return torch.softmax(logits.masked_fill(~visible, float("-inf")), dim=-1) @ v
