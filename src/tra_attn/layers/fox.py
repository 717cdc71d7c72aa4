"""Forgetting Transformer attention, FoX (Lin, Nikishin, He, Courville, ICLR 2025, arXiv 2503.02130).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + sum_{l=j+1..i} log f_l) v_j,
    f_l = sigmoid(w_h . x_l + b_h)   (a scalar forget gate per head and per key/time-step position)

The basic FoX layer (no QK-norm, output gate or token shift of the "Pro" variant: layers/fox_pro.py), no other
positional encoding. The cache stores each key's log forget gate. In a packed or padded batch the op
zeroes the gates of padding and of each document's first token (ops/fox.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn

from ..ops.fox import forgetting_attention
from .base import Attention
from .options import KindOptions, option


@dataclass(frozen=True)
class FoXOptions(KindOptions):
    prefix = "fox"
    gate_bias_init: float = option(0.0, "initial bias of the forget gate")


class FoXAttention(Attention):
    Options = FoXOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.fgate_proj = nn.Linear(d_model, n_heads, bias=True)
        self.post_init()

    def post_init(self):
        nn.init.constant_(self.fgate_proj.bias, self.options.gate_bias_init)

    def log_forget_gate(self, x):
        """log f = logsigmoid(x w_h + b_h) of every new position, (B, H, S) in fp32."""
        return F.logsigmoid(self.fgate_proj(x).float()).transpose(1, 2)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, extras = self.with_cache(cache, k, v, log_fgate=self.log_forget_gate(x))
        dropout = self.logit_dropout()
        return forgetting_attention(q, k, v, extras["log_fgate"], logit_dropout=dropout, segment_ids=segment_ids)
