"""Forgetting Transformer attention, FoX (Lin, Nikishin, He, Courville, ICLR 2025, arXiv 2503.02130).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + sum_{l=j+1..i} log f_l) v_j,
    f_l = sigmoid(w_h . x_l + b_h)   (a scalar forget gate per head and per key/time-step position)

The basic FoX layer (no QK-norm, output gate or token shift of the "Pro" variant), no other
positional encoding. The cache stores each key's log forget gate. In a packed or padded batch the op
zeroes the gates of padding and of each document's first token (ops/fox.py).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from ..ops.fox import forgetting_attention
from .base import Attention


class FoXAttention(Attention):
    def __init__(self, config):
        super().__init__(config)
        self.fgate_proj = nn.Linear(config.d_model, config.n_heads, bias=True)

    def post_init(self, config):
        nn.init.constant_(self.fgate_proj.bias, config.gate_bias_init)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        log_fgate = F.logsigmoid(self.fgate_proj(x).float()).transpose(1, 2)  # (B, H, S)
        k, v, extras = self.with_cache(cache, k, v, log_fgate=log_fgate)
        dropout = self.logit_dropout()
        return forgetting_attention(q, k, v, extras["log_fgate"], logit_dropout=dropout, segment_ids=segment_ids)
