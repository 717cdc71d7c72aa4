"""Scalable-Softmax attention layer, SSMax (Nakanishi 2025, arXiv 2501.19399), with RoPE as the paper's models.

    out_i = sum_{j <= i} softmax_j(s_h log(n_i) R(i) q_i . R(j) k_j / sqrt(D)) v_j,   n_i = i + 1

n_i is the number of keys query i sees, counted within its document in a packed or padded batch (a document's
first token sees one key: log 1 = 0, and its only key gets weight 1). s_h is learned per head and starts at the
option ``s_init``. R(p) is RoPE (``rope``, the default; base 10000, the "rotate half" layout of layers/rope.py):
the paper's models use RoPE and the paper publishes no code; the ASEntmax authors' port of SSMax (deep-spin/asentmax,
``synthetic/src/models/architectures/sparse_gemma.py``, the "nakanishi" scaling of ``SparseGemma2Attention`` at
commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d, with ``apply_rotary``) rotates q and k first and scales the
rotated q, as here (the factor depends on the query only, so the order does not matter). Positions count from each
document's first real token and, in decoding, from the cache length; keys are cached after rotation. That port
takes log(n_i + 1) (its table log(i + 2)); the paper's log(n_i) is used here. ``rope=False``: no positional
encoding (this library's first version). The factor is folded into q and SDPA runs the rest in O(S) memory
(ops/ssmax.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.rope import rotate_new_positions
from ..ops.rows import key_counts
from ..ops.ssmax import ssmax_attention
from .base import Attention
from .options import KindOptions, option, positive
from .rope import check_even_head_dim

ROPE_BASE = 10000.0  # RoPE's usual base; the port's Gemma 2 config (rope_theta) has the same


@dataclass(frozen=True)
class SSMaxOptions(KindOptions):
    prefix = "ssmax"
    s_init: float = option(1.0, "initial value of the learned per-head factor s on log(n)", positive)
    rope: bool = option(
        True, "rotate q and k with RoPE (base 10000), as the paper's models; false: no positional encoding"
    )


class SSMaxAttention(Attention):
    Options = SSMaxOptions

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        if options.rope:
            check_even_head_dim(d_model, n_heads, "SSMaxOptions.rope = True (or rope = False)")

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.s = nn.Parameter(torch.empty(n_heads))
        self.post_init()

    def post_init(self):
        nn.init.constant_(self.s, self.options.s_init)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        sq, past = q.shape[-2], self.past_length(cache)
        n = key_counts(sq, past, segment_ids, q.device)
        if self.options.rope:
            q, k = rotate_new_positions(q, k, past, segment_ids, ROPE_BASE)
        k, v, _ = self.with_cache(cache, k, v)
        return ssmax_attention(q, k, v, self.s, n, logit_dropout=self.logit_dropout(), segment_ids=segment_ids)
