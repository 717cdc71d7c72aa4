"""Selective attention layer (Leviathan, Kalman, Matias, ICLR 2025, arXiv 2410.02703): parameter-free; a token can
mask an earlier token from every later query, through head 0's positive logits.

    C^h_ij = q^h_i . k^h_j / sqrt(D),   S_kj = ReLU(C^0_kj) (0 for k = j and for a document's first token j)
    F_ij   = sum_{k < i} S_kj,          out^h_i = sum_{j <= i} softmax_j(C^h_ij - F_ij) v^h_j

No other positional encoding: the mechanism needs none, and has no official code (the reference ported in the tests
is x-transformers' ``selective_attn``, lucidrains/x-transformers, ``x_transformers/attend.py``, commit
9252ed7838021ee61e6c5be0930b3a9a88efdf06, which applies positions, if any, outside it). Math in ops/selective.py
(materialised). F_ij for a new query needs the selections of every earlier query, so the KV cache keeps, per key,
sum_k S_kj over the queries it has seen (the extra ``selected``), updated in place after each forward: the cache's
extras are views of its buffers, and the cache is an inference structure.
"""

from __future__ import annotations

from ..ops.masks import compute_dtype
from ..ops.selective import selective_attention
from .base import Attention


class SelectiveAttention(Attention):
    def attend(self, x, q, k, v, cache, segment_ids=None):
        b, _, s, _ = q.shape
        new = q.new_zeros(b, 1, s, dtype=compute_dtype(q.dtype))  # no query has selected the new keys yet
        k, v, extras = self.with_cache(cache, k, v, selected=new)
        selected = None if cache is None else extras["selected"]
        out, added = selective_attention(
            q,
            k,
            v,
            None if selected is None else selected[:, 0],
            logit_dropout=self.logit_dropout(),
            segment_ids=segment_ids,
        )
        if selected is not None:
            selected.add_(added[:, None])  # the cache's buffer: later queries see these selections too
        return out
