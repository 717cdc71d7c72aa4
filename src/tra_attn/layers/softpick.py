"""Softpick attention layer (Zuhri, Fuadi, Aji 2025, arXiv 2504.20966): rectified weights, no attention sink.

    s_ij  = R(i) q_i . R(j) k_j / sqrt(D)        (RoPE R with ``rope``, the default; else plain q_i . k_j)
    out_i = sum_{j <= i} relu(e^s_ij - 1) / (sum_{l <= i} |e^s_il - 1| + eps) v_j

Keys with s <= 0 weigh exactly 0 but still count in the denominator; a query whose scores are all <= 0 outputs 0.
The op (ops/softpick.py) follows the authors' stable form and epsilon (zaydzuhri/softpick-attention,
``naive_softpick_attn.py`` and ``flash_softpick_attn.py`` at commit c97f4dc5f9fcec2e8afc2932db2cba6d7d7e5465).
Positions as their models run: their training configs (zaydzuhri/flame, branch softpick-attention at commit
b4a8c8ba9b9144482242ef54dc6095eaaf2eb3e8, ``configs/softpick_transformer_340M.json``, ``..._1B.json``:
``model_type: transformer``, ``rope_theta`` 10000) build the ``Attention`` layer of their flash-linear-attention
fork, which rotates q and k by RoPE unconditionally (zaydzuhri/flash-linear-attention, ``fla/layers/attn.py``,
``self.rotary(q, k, ...)``, on main at ec79593062294d5efa1f4c70d95113f82f637fd5 and on their sibling branch
rectified-softmax-attention; the softpick branch flame pins was not available to read), base 10000;
``rope=False`` runs it without positional encoding. Logit dropout drops s (a dropped key weighs 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.logit_dropout import IMPLS
from ..ops.rope import rotate_new_positions
from ..ops.softpick import softpick_attention
from .base import Attention
from .options import KindOptions, one_of, option, positive
from .rope import check_even_head_dim


@dataclass(frozen=True)
class SoftpickOptions(KindOptions):
    prefix = "softpick"
    rope: bool = option(True, "RoPE (base 10000) on q and k, as the authors' models; false: no positional encoding")
    eps: float = option(
        1e-6,
        "added to the max-rescaled denominator: the authors' training kernel's 1e-6 (their naive function: 1e-8)",
        positive,
    )
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )


class SoftpickAttention(Attention):
    Options = SoftpickOptions

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        if options.rope:
            check_even_head_dim(d_model, n_heads, "SoftpickOptions.rope = True (or rope = False)")

    def attend(self, x, q, k, v, cache, segment_ids=None):
        if self.options.rope:
            q, k = rotate_new_positions(q, k, self.past_length(cache), segment_ids)
        k, v, _ = self.with_cache(cache, k, v)
        o = self.options
        dropout = self.logit_dropout()
        return softpick_attention(q, k, v, eps=o.eps, impl=o.impl, logit_dropout=dropout, segment_ids=segment_ids)
