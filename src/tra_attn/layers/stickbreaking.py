"""Stick-breaking attention layer (Tan, Shen, Yang, Courville, Panda, ICLR 2025, arXiv 2410.17980).

    A_ij  = sigmoid(z_ij) prod_{j < l < i} (1 - sigmoid(z_il)),   z_ij = q_i . k_j / sqrt(D),   j < i
    out_i = sum_j A_ij v_j                                         (no other positional encoding)

Going leftwards from the query, each key takes the fraction sigmoid(z) of what is left of the stick; the rest
is not renormalised (ops/stickbreaking.py). Options follow the authors' kernels: ``attend_current`` (the query's
own key is a candidate too, j <= i) and what the leftover stick weighs. Padding and other documents' keys
neither take mass nor break the stick; logit dropout drops z (a dropped key takes half of what is left).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.stickbreaking import IMPLS, REMAINDERS, stickbreaking_attention
from .base import Attention
from .options import KindOptions, one_of, option


@dataclass(frozen=True)
class StickBreakingOptions(KindOptions):
    prefix = "stickbreaking"
    attend_current: bool = option(
        False, "the query's own key is a candidate too (j <= i); the authors' default: only earlier keys (j < i)"
    )
    remainder: str = option(
        "none",
        "the stick left over, 1 - sum_j A_ij: 'none' (dropped) or 'value' (weighs the query's own value, as the "
        "authors' tests)",
        one_of(*REMAINDERS),
    )
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )


class StickBreakingAttention(Attention):
    Options = StickBreakingOptions

    def attend(self, x, q, k, v, cache, segment_ids=None):
        k, v, _ = self.with_cache(cache, k, v)
        o = self.options
        return stickbreaking_attention(
            q,
            k,
            v,
            attend_current=o.attend_current,
            remainder=o.remainder,
            impl=o.impl,
            logit_dropout=self.logit_dropout(),
            segment_ids=segment_ids,
        )
