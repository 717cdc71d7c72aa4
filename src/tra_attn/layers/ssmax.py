"""Scalable-Softmax attention layer, SSMax (Nakanishi 2025, arXiv 2501.19399).

    out_i = sum_{j <= i} softmax_j(s_h log(n_i) q_i . k_j / sqrt(D)) v_j,   n_i = i + 1

n_i is the number of keys query i sees, counted within its document in a packed or padded batch (a document's
first token sees one key: log 1 = 0, and its only key gets weight 1). s_h is learned per head and starts at the
option ``s_init``. The factor is folded into q and SDPA runs the rest in O(S) memory (ops/ssmax.py); no other
positional encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.rows import key_counts
from ..ops.ssmax import ssmax_attention
from .base import Attention
from .options import KindOptions, option, positive


@dataclass(frozen=True)
class SSMaxOptions(KindOptions):
    prefix = "ssmax"
    s_init: float = option(1.0, "initial value of the learned per-head factor s on log(n)", positive)


class SSMaxAttention(Attention):
    Options = SSMaxOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.s = nn.Parameter(torch.empty(n_heads))
        self.post_init()

    def post_init(self):
        nn.init.constant_(self.s, self.options.s_init)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        n = key_counts(q.shape[-2], self.past_length(cache), segment_ids, q.device)
        k, v, _ = self.with_cache(cache, k, v)
        return ssmax_attention(q, k, v, self.s, n, logit_dropout=self.logit_dropout(), segment_ids=segment_ids)
