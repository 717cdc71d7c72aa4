"""ALiBi attention (Press, Smith, Lewis, ICLR 2022, arXiv 2108.12409).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) - m_h (i - j)) v_j

with the standard fixed geometric slopes m_h (not learned). Runs on PyTorch SDPA with a float bias. In a
packed or padded batch, i and j are positions in the document (left padding shifts nothing).
"""

from __future__ import annotations

from ..ops.alibi import alibi_attention, alibi_slopes
from .base import Attention


class ALiBiAttention(Attention):
    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, _ = self.with_cache(cache, k, v)
        return alibi_attention(q, k, v, self.slopes, logit_dropout=self.logit_dropout(), segment_ids=segment_ids)
