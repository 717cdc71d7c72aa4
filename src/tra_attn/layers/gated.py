"""Gated attention layer (Qiu et al. 2025, arXiv 2505.06708; the gate of Qwen3-Next): a sigmoid gate on each head's
output, which makes the value/output map non-linear and sparse and removes the attention sink.

    q_i, k_j = RMSNorm(q_i), RMSNorm(k_j)                    (per head, learned weight: ``qk_norm``, the default)
    o_i      = sum_{j <= i} softmax_j(R(i) q_i . R(j) k_j / sqrt(D)) v_j     (RoPE R, base 10000: ``rope``)
    out_i    = o_i * sigmoid(x_i W_g)                        (per head, before the output projection)

The authors' code: qiuzh20/gated_attention, ``modeling_qwen3.py`` (``Qwen3Attention``) at commit
49645df63aafe9e680bc44a9c0ca280d4aefa8e9. ``gate``: "elementwise" (the default, their best variant: G1, after SDPA,
one gate per head and channel, ``elementwise_attn_output_gate``) or "headwise" (one gate per head,
``headwise_attn_output_gate``). Their gate is extra rows of the q projection, so it reads the attention's input x;
here it is ``gate_proj``, bias-free like this library's q projection. QK-norm and RoPE are part of the Qwen3 layer
the gate sits in as they run it (``configuration_qwen3.py``: ``use_qk_norm=True`` by default, ``rope_theta`` 10000;
``Qwen3Attention.forward`` applies RoPE unconditionally, after the norm), so both are on by default, and options to
turn off. Attention runs on SDPA in O(S) memory (ops/gated.py); logit dropout as every kind's.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..ops.gated import gated_attention
from ..ops.rope import rotate_new_positions
from .base import Attention
from .norms import RMSNorm
from .options import KindOptions, one_of, option
from .rope import check_even_head_dim

GATES = ("elementwise", "headwise")


@dataclass(frozen=True)
class GatedOptions(KindOptions):
    prefix = "gated"
    gate: str = option(
        "elementwise",
        "sigmoid output gate per head and channel ('elementwise', the authors' best, G1) or per head ('headwise')",
        one_of(*GATES),
    )
    rope: bool = option(True, "RoPE (base 10000) on q and k, as the authors' Qwen3 layer; false: none")
    qk_norm: bool = option(True, "RMSNorm (learned weight) on each head's q and k before RoPE, as the authors' layer")


class GatedAttention(Attention):
    Options = GatedOptions
    own_block_parts = ("output_gate", "output_norm")  # its gate multiplies inside the op: a norm would follow it

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        if options.rope:
            check_even_head_dim(d_model, n_heads, "GatedOptions.rope = True (or rope = False)")

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        elementwise = self.options.gate == "elementwise"
        self.gate_proj = nn.Linear(d_model, d_model if elementwise else n_heads, bias=False)
        if self.options.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, self.norm_eps)
            self.k_norm = RMSNorm(self.head_dim, self.norm_eps)

    def gate_logits(self, x):
        """x W_g of the new positions, per head: (B, H, S, D) elementwise, (B, H, S, 1) headwise."""
        b, s, _ = x.shape
        return self.gate_proj(x).view(b, s, self.n_heads, -1).transpose(1, 2)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        if self.options.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.options.rope:
            q, k = rotate_new_positions(q, k, self.past_length(cache), segment_ids)
        k, v, _ = self.with_cache(cache, k, v)
        dropout = self.logit_dropout()
        return gated_attention(q, k, v, self.gate_logits(x), logit_dropout=dropout, segment_ids=segment_ids)
