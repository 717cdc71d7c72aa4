"""Gated attention (Qiu et al. 2025, arXiv 2505.06708): softmax attention whose output is gated per head.

    out_i = sigmoid(g_i) * sum_{j <= i} softmax_j(q_i . k_j / sqrt(D)) v_j,   g_i = x_i W_g   (per head)

The gate follows SDPA and precedes the output projection (their "G1" position); g_i is (B, H, S, D) for their
elementwise gate or (B, H, S, 1) for the headwise one. The attention itself is PyTorch SDPA (``causal_sdpa``),
O(S) memory, materialised only under logit dropout (ops/logit_dropout.py).
"""

from __future__ import annotations

import torch

from .causal import causal_sdpa


def gated_attention(q, k, v, gate_logits, logit_dropout: float = 0.0, segment_ids=None) -> torch.Tensor:
    """Causal softmax attention of q (B, H, Sq, D), k/v (B, H, Sk, D), times sigmoid(``gate_logits``) (B, H, Sq, D
    or 1). ``segment_ids`` (B, Sk) of the keys, -1 on padding, for packed or padded batches."""
    out = causal_sdpa(q, k, v, logit_dropout=logit_dropout, segment_ids=segment_ids)
    return out * torch.sigmoid(gate_logits).to(out.dtype)
