"""What a TRA layer keeps and where its attention goes, materialised for diagnosis (``tra inspect``).

For a layer input x (B, S, d_model) without cache, per head: the keep mask as the layer's rule decides it
(threshold, or none in dense heads; local and sliding windows; documents), which kept keys only the local
window keeps, the count c_ij, and the attention weights exactly as the layer's op computes them (the op is
run on one-hot values, so every option of the TRA layer, the key-gate ablation included, is measured by its own
path). O(S^2) memory per head: meant for diagnosis at moderate lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.tra.naive import keep_mask, reverse_cumsum
from .tra import TRAAttention


@dataclass
class AttentionMap:
    """keep, window_only (B, H, S, S) bool: kept keys, and those kept only by the local window (their score is
    not above the threshold); count (B, H, S, S): the number of kept keys in [j, i]; weights (B, H, S, S): the
    softmax weights (zero on keys not kept; a row with no kept key is all zero)."""

    keep: torch.Tensor
    window_only: torch.Tensor
    count: torch.Tensor
    weights: torch.Tensor


@torch.no_grad()
def attention_map(layer: TRAAttention, x: torch.Tensor, segment_ids: torch.Tensor | None = None) -> AttentionMap:
    """The layer's keep decisions and attention weights on input ``x`` (evaluation: the exact threshold)."""
    q, k = layer.normalize(*(layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj)))
    scores = q.double() @ k.double().transpose(-1, -2) * layer.head_dim**-0.5
    o = layer.options
    n, threshold = o.dense_heads, o.threshold
    dense = keep_mask(scores[:, :n], float("-inf"), 0, o.dense_window, segment_ids)
    sparse = keep_mask(scores[:, n:], threshold, o.local_window, 0, segment_ids)
    keep = torch.cat([dense, sparse], dim=1)
    by_score = torch.cat([dense, sparse & (scores[:, n:] > threshold)], dim=1)
    weights = _weights(layer, x, q, k, segment_ids)
    return AttentionMap(keep, keep & ~by_score, reverse_cumsum(keep.long()), weights)


def _weights(layer: TRAAttention, x, q, k, segment_ids) -> torch.Tensor:
    """Attention weights (B, H, S, S): the layer's own ``by_heads`` on one-hot values, head_dim keys at a time."""
    b, h, s, d = q.shape
    gate = layer.log_gate(x)  # at the queries, and (no cache) at the keys for the key-gate ablation
    eye = torch.eye(s, dtype=q.dtype, device=q.device)
    columns = []
    for start in range(0, s, d):
        block = eye[:, start : start + d]
        v = torch.nn.functional.pad(block, (0, d - block.shape[1])).expand(b, h, s, d)
        columns.append(layer.by_heads(q, k, v, gate, segment_ids)[..., : block.shape[1]])
    return torch.cat(columns, dim=-1).double()
