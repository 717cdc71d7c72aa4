"""ALiBi attention (Press, Smith, Lewis, ICLR 2022, arXiv 2108.12409).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) - m_h (i - j)) v_j

with the standard fixed geometric slopes m_h (not learned). Runs on PyTorch SDPA with a float bias. In a
packed or padded batch, i and j are positions in the document (left padding shifts nothing).
``random_positions`` N > 0: training forwards use the model's random positions in [0, N) (ops/positions.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.alibi import alibi_attention, alibi_slopes
from .base import Attention
from .options import RandomPositionsOptions, random_positions_at_eval_option, random_positions_option


@dataclass(frozen=True)
class ALiBiOptions(RandomPositionsOptions):
    prefix = "alibi"
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()


class ALiBiAttention(Attention):
    Options = ALiBiOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        slopes, dropout = self.slopes, self.logit_dropout()
        return alibi_attention(q, k, v, slopes, logit_dropout=dropout, segment_ids=segment_ids, positions=positions)
