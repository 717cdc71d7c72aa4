"""Wall attention layer (Tilde Research: Timor Averbuch, Dhruv Pai, "Wall Attention: Length Generalization With
Diagonal Gates", blog.tilderesearch.com/blog/wall-attn, June 2026): a learned per-channel decay inside q . k.

    logits_ij = sum_n q_in k_jn exp(P_in - P_jn) / sqrt(D) [+ c_i - c_j],   P = cumsum(logsigmoid(W_g x + b_g))
    out_i     = sum_{j <= i} softmax_j(logits_ij) v_j                       [+ a sink logit per head in the softmax]

P is per head and channel (W_g: d_model -> d_model, bias b_g), so each channel of q . k decays with its own
data-dependent rate; no other positional encoding. Follows the authors' layer ``WallAttention`` in
fla-org/flash-linear-attention, ``fla/layers/wall_attn.py`` at commit bc3b101dcb713ddc5bd8924b66754eb68b5ccf89
(their op: ``fla/ops/wall_attn/``; they work in base 2, the same numbers): the gate bias starts at 8
(logsigmoid(8) ~ -3e-4: near-plain attention at initialisation), and the options are theirs with their defaults:
a FoX-style scalar forget gate per head (``scalar_gate``, c = cumsum(logsigmoid(w_h . x + b)), off), a sliding
window (``window``, off) and, from their op, a learned sink logit per head (``sink``, off; their layer passes
none). ``gate_max`` is the soft clamp g -> g_max expm1(g / g_max) of the per-channel log gates that a newer release of
the authors' own code applies once per token (g_max 0.86: each token keeps at least e^-0.86 of every channel, a bound
their kernel's exponents need; read in bicycleman15/wall-attention-release, a fork of tilde-research's release,
``wall_attn/gates.py`` at f3b8ee96); off by default, as in fla's layer, since the chunked op here needs no such
bound. Their ``qk_norm`` and output gate are not options here. The cache stores P (and c) of every key;
packed and padded batches zero the gates of padding and of each document's first token (ops/wall.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.logit_dropout import IMPLS
from ..ops.masks import compute_dtype
from ..ops.wall import cumulative_decay, wall_attention
from .base import Attention
from .options import KindOptions, non_negative, non_negative_int, one_of, option


@dataclass(frozen=True)
class WallOptions(KindOptions):
    prefix = "wall"
    gate_bias_init: float = option(
        8.0, "initial bias of the decay gates (the authors' gate_init_bias: logsigmoid(8) ~ 0, near-plain attention)"
    )
    scalar_gate: bool = option(False, "add a FoX-style scalar forget gate per head (the authors' use_scalar_gate)")
    sink: bool = option(False, "a learned sink logit per head in the softmax denominator (the authors' sink_bias)")
    sink_init: float = option(0.0, "initial value of the sink logits (with sink)")
    window: int = option(0, "sliding window: key j is visible to query i iff i - j < window; 0: none", non_negative_int)
    gate_max: float = option(
        0.0,
        "soft clamp of the log decay gates to (-gate_max, 0]: gate_max * expm1(g / gate_max) (the authors' newer "
        "release: 0.86); 0: none, as fla's layer",
        non_negative,
    )
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )


class WallAttention(Attention):
    Options = WallOptions

    @classmethod
    def materializes(cls, options) -> bool:
        """The naive op builds (B, H, Sq, Sk, D) tensors."""
        return options.impl == "naive"

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.gate_proj = nn.Linear(d_model, d_model, bias=True)  # a log decay per head and channel
        self.scalar_gate_proj = nn.Linear(d_model, n_heads, bias=True) if self.options.scalar_gate else None
        self.sink = nn.Parameter(torch.empty(n_heads)) if self.options.sink else None
        self.post_init()

    def post_init(self):
        nn.init.constant_(self.gate_proj.bias, self.options.gate_bias_init)
        if self.scalar_gate_proj is not None:
            nn.init.constant_(self.scalar_gate_proj.bias, self.options.gate_bias_init)
        if self.sink is not None:
            nn.init.constant_(self.sink, self.options.sink_init)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        cdt = compute_dtype(x.dtype)  # the authors take the gates in fp32
        past = cache.extras if cache is not None and cache.length else {}
        log_gate = F.logsigmoid(self.gate_proj(x).to(cdt))
        if self.options.gate_max:  # slope 1 at 0, so near-plain attention at initialisation stays so
            log_gate = self.options.gate_max * torch.expm1(log_gate / self.options.gate_max)
        log_gate = self.split_heads(log_gate)  # (B, H, S, D)
        last = past["log_decay"][..., -1] if past else None
        # the cache's extras grow along their last axis: P is kept as (B, H, D, S)
        extras = {"log_decay": cumulative_decay(log_gate, segment_ids, last).transpose(-1, -2)}
        if self.scalar_gate_proj is not None:
            scalar_gate = F.logsigmoid(self.scalar_gate_proj(x).to(cdt)).transpose(1, 2)  # (B, H, S)
            last = past["scalar_decay"][..., -1] if past else None
            extras["scalar_decay"] = cumulative_decay(scalar_gate, segment_ids, last)
        k, v, extras = self.with_cache(cache, k, v, **extras)
        o = self.options
        return wall_attention(
            q,
            k,
            v,
            extras["log_decay"].transpose(-1, -2),
            scalar_decay=extras.get("scalar_decay"),
            sink=self.sink,
            window=o.window,
            impl=o.impl,
            logit_dropout=self.logit_dropout(),
            segment_ids=segment_ids,
        )
