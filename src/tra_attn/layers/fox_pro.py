"""Forgetting Transformer attention in its "Pro" configuration, FoX (Pro) (Lin, Nikishin, He, Courville, ICLR 2025,
arXiv 2503.02130; the configuration also of the ACP paper, arXiv 2504.06949).

FoX (layers/fox.py, whose op it reuses) with QK-norm, a token shift of keys and values and a gated output norm:

    K_l = x_l W_k,  V_l = x_l W_v,  a_l = sigmoid(x_l . u_h),  b_l = sigmoid(x_l . u'_h)   (per head h)
    k_l = N_h((1 - a_l) K_l + a_l K_{l-1}),  v_l = (1 - b_l) V_l + b_l V_{l-1},  q_i = N_h(x_i W_q)
    o_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + sum_{l=j+1..i} log f_l) v_j,  f_l = sigmoid(x_l . w_h + b_h)
    y_i = W_o (N'_h(o_i) * sigmoid(x_i W_g))

N_h, N'_h: RMSNorm over each head's D channels with a learned weight per head and channel (the authors'
``GroupNorm(num_groups=H, is_rms_norm=True)``; epsilon ``qk_norm_eps`` for q and k, the layer's ``norm_eps`` for
the output). W_g (d_model x d_model, no bias) gates every channel of the normalised output, before W_o. The shift's
mixes a, b are one scalar per head and position from bias-free projections of x; K_{l-1} = V_{l-1} = 0 at a
sequence's first token, as the authors' kernel loads zero there, and, in a packed or padded batch, at every
document's first token (the authors zero the projections of padding): nothing crosses a document or comes from
padding. The forget gate is zeroed there as in FoX. ACP (the authors' optional pruning, ``log_pruning_tolerance``)
is not part of the layer: it skips blocks whose weight is below a tolerance, an approximation for speed.

The cache holds the unshifted projections K, V and each key's log f, a and b; every forward shifts and normalises
the keys it attends to (what decoding needs of the previous token is its projections). Decoding a token thus costs
O(S D) more than FoX; a chunk after a cached prefix continues it exactly (the authors' layer shifts a multi-token
chunk from zero, ignoring its shift state). W_o has a bias, as in every kind of the library (the authors': none).

Checked against zhixuan-lin/forgetting-transformer at commit 883f260c636e87971339749b0d8310004794a5cc:
src/forgetting_transformer/model/forgetting_transformer/modeling_forgetting_transformer.py (``ShiftLinear``,
``ForgettingAttentionLayer``), token_shift.py, layernorm.py (``group_norm_ref``) and fuse_norm_gate.py
(``group_norm_gated_ref``); the Pro flags (use_k_shift, use_v_shift, qk_norm, use_output_gate, use_output_norm)
from README.md and configs/experiment/longcrawl64/forgetting_transformer/pro_*.yaml (tests/layers/test_fox_pro.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.fox import forgetting_attention, token_shift
from ..ops.masks import compute_dtype
from .fox import FoXAttention, FoXOptions
from .norms import HeadRMSNorm
from .options import option, positive


@dataclass(frozen=True)
class FoXProOptions(FoXOptions):
    prefix = "fox_pro"
    qk_norm_eps: float = option(1e-5, "epsilon of the per-head RMSNorm of q and k (the authors' 1e-5)", positive)


class FoXProAttention(FoXAttention):
    Options = FoXProOptions
    own_block_parts = ("output_gate", "output_norm", "kv_shift")

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.k_shift_proj = nn.Linear(d_model, n_heads, bias=False)
        self.v_shift_proj = nn.Linear(d_model, n_heads, bias=False)
        self.ogate_proj = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = HeadRMSNorm(n_heads, self.head_dim, self.options.qk_norm_eps)
        self.k_norm = HeadRMSNorm(n_heads, self.head_dim, self.options.qk_norm_eps)
        self.o_norm = HeadRMSNorm(n_heads, self.head_dim, self.norm_eps)

    def shift_mix(self, proj: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """The shift's mix sigmoid(x . u_h) of every new position, (B, H, S) in fp32 (fp64 for fp64 input)."""
        return torch.sigmoid(proj(x).to(compute_dtype(x.dtype))).transpose(1, 2)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        mixes = {"k_mix": self.shift_mix(self.k_shift_proj, x), "v_mix": self.shift_mix(self.v_shift_proj, x)}
        k, v, extras = self.with_cache(cache, k, v, log_fgate=self.log_forget_gate(x), **mixes)
        k = self.k_norm(token_shift(k, extras["k_mix"], segment_ids))
        v = token_shift(v, extras["v_mix"], segment_ids)
        dropout = self.logit_dropout()
        out = forgetting_attention(
            self.q_norm(q), k, v, extras["log_fgate"], logit_dropout=dropout, segment_ids=segment_ids
        )
        return self.o_norm(out) * torch.sigmoid(self.split_heads(self.ogate_proj(x))).to(out.dtype)
