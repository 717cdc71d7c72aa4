"""NoPE: causal softmax attention with no positional encoding (Kazemnejad et al. 2023, arXiv 2305.19466).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D)) v_j

The causal mask is the only source of order information. Runs on PyTorch SDPA.
"""

from __future__ import annotations

from ..ops.causal import causal_sdpa
from .base import Attention


class NoPEAttention(Attention):
    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, _ = self.with_cache(cache, k, v)
        return causal_sdpa(q, k, v, logit_dropout=self.logit_dropout(), segment_ids=segment_ids)
