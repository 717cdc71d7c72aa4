"""CoPE attention: contextual position encoding (Golovneva et al. 2024, arXiv 2405.18719).

    g_ij = sigmoid(q_i . k_j / sqrt(D)),  p_ij = min(sum_{l=j..i} g_il, npos_max - 1),
    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + interp_p(q_i . E[p_ij])) v_j

with a learned position table E (head_dim x npos_max, zero-initialised, shared by the heads of a
layer) and npos_max = the option ``max_pos``. Materialises the (Sq, Sk) scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.cope import cope_attention
from .base import Attention
from .options import KindOptions, option, positive_int


@dataclass(frozen=True)
class CoPEOptions(KindOptions):
    prefix = "cope"
    max_pos: int = option(64, "CoPE position table size (positions are clamped below it)", positive_int)


class CoPEAttention(Attention):
    Options = CoPEOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.pos_emb = nn.Parameter(torch.zeros(self.head_dim, self.options.max_pos))

    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, _ = self.with_cache(cache, k, v)
        dropout = self.logit_dropout()
        return cope_attention(q, k, v, self.pos_emb.to(q.dtype), logit_dropout=dropout, segment_ids=segment_ids)
