"""Stick-breaking attention layer (Tan, Shen, Yang, Courville, Panda, ICLR 2025, arXiv 2410.17980), as its authors'
model layer computes it.

    A_ij   = sigmoid(z_ij) prod_{j < l < i} (1 - sigmoid(z_il)),   z_ij = q_i . k_j / sqrt(D),   j < i
    o_ih   = sum_j A_ij v_j + rem_ih b_h,     rem_ih = 1 - sum_j A_ij   (the stick left over, per head h)
    out_i  = W_o GroupNorm_H(o_i1, ..., o_iH) + b_o                   (no other positional encoding)

Going leftwards from the query, each key takes the fraction sigmoid(z) of what is left of the stick; the rest is
not renormalised (ops/stickbreaking.py). ``head_norm`` (the default) is the authors' layer, ``SBAttention`` in
IBM/dolomite-engine, ``lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/stickbreaking_attention.py`` at
commit d0ee186128e8b8dfff7c1f90390398fdabc75be7 (the model ``shawntan/stickbreaking-attention`` points to): the
leftover stick times a learned per-head bias b_h (shape (H, D), zeros at the start) is added to each head's output
first, then ``torch.nn.GroupNorm(H, d_model)`` (one group per head: each head's D channels normalised over
themselves, eps 1e-5, a learned per-channel scale and shift from 1 and 0) before the output projection.
``head_norm=False``: the heads' outputs go to the projection as they are (this library's first version).

The other options follow the authors' kernels, whose defaults the authors' layer keeps: ``attend_current`` (the
query's own key is a candidate too, j <= i; their layer calls ``sb_attn`` without it: j < i) and what the leftover
stick weighs on the value (``remainder``: their layer puts it on b_h only, their kernel tests on the query's own
value). Padding and other documents' keys neither take mass nor break the stick; logit dropout drops z (a dropped
key takes half of what is left).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.logit_dropout import IMPLS
from ..ops.stickbreaking import REMAINDERS, stickbreaking_attention
from .base import Attention
from .options import KindOptions, one_of, option

GROUP_NORM_EPS = 1e-5  # the authors' torch.nn.GroupNorm default (not the model's RMSNorm epsilon, norm_eps)


@dataclass(frozen=True)
class StickBreakingOptions(KindOptions):
    prefix = "stickbreaking"
    attend_current: bool = option(
        False, "the query's own key is a candidate too (j <= i); the authors' default: only earlier keys (j < i)"
    )
    remainder: str = option(
        "none",
        "the stick left over, 1 - sum_j A_ij, on the value: 'none' (not there) or 'value' (weighs the query's own "
        "value, as the authors' kernel tests)",
        one_of(*REMAINDERS),
    )
    head_norm: bool = option(
        True,
        "the authors' layer: the leftover stick times a learned per-head bias added to each head, then a per-head "
        "GroupNorm before the output projection; false: the heads as they are",
    )
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )


class StickBreakingAttention(Attention):
    Options = StickBreakingOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        if self.options.head_norm:
            self.head_bias = nn.Parameter(torch.empty(n_heads, self.head_dim))
            self.norm = nn.GroupNorm(n_heads, d_model, eps=GROUP_NORM_EPS)
        self.post_init()

    def post_init(self):
        if self.options.head_norm:
            nn.init.zeros_(self.head_bias)
            self.norm.reset_parameters()

    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, _ = self.with_cache(cache, k, v)
        o = self.options
        out, rem = stickbreaking_attention(
            q,
            k,
            v,
            attend_current=o.attend_current,
            remainder=o.remainder,
            impl=o.impl,
            logit_dropout=self.logit_dropout(),
            segment_ids=segment_ids,
            return_remainder=True,
        )
        if not o.head_norm:
            return out
        out = out + rem[..., None] * self.head_bias[None, :, None, :].to(out.dtype)
        b, h, s, d = out.shape
        normed = self.norm(out.transpose(1, 2).reshape(b * s, h * d))  # the groups: each head's d channels
        return normed.view(b, s, h, d).transpose(1, 2)
