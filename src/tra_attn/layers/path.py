"""PaTH attention layer (Yang, Shen, Wen, Tan, Mishra, Ren, Panda, Kim, arXiv 2505.16381): kinds ``path`` and
``path_fox`` (with FoX's forget gate).

    s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j,   H_t = I - beta_t w_t w_t^T          (j <= i; ops/path.py)
    w_t = l2norm(SiLU(conv_3(W_2 W_1 x_t))) per head,   beta_t = 2 sigmoid(x_t . u_h + c_h)  in (0, 2)
    out_i = sum_{j <= i} softmax_j(scale * (s_ij + sum_{l=j+1..i} log f_l)) v_j,   f_l = sigmoid(x_l . a_h + b_h)

as the authors' layer, fla-org/flash-linear-attention fla/layers/path_attn.py (``PaTHAttention``) at commit
bc3b101dcb713ddc5bd8924b66754eb68b5ccf89: w from a low-rank projection (rank 32, ``w_rank``; 0: full) and a short
causal depthwise convolution with SiLU (width 3, no bias, ``w_conv_size``; 0: none), L2-normalised per head in fp32
(x / sqrt(|x|^2 + eps)); beta from a projection with bias per head, negative eigenvalues allowed (beta > 1); the
forget gate (``forget_gate``: what ``path_fox`` turns on) a projection with bias per head, scaled by 1/sqrt(D) with
the logits, as their kernels do. No other positional encoding. Not ported: their optional per-head q/k RMSNorm
(``use_qk_norm``, which their model never sets) and grouped key heads; W_o has a bias as in every kind here. The
convolution keeps PyTorch's default initialisation unless ``w_conv_init_std`` is set: the authors' model draws it
from N(0, 0.02) as its linear layers (fla ``fla/models/path_attn/modeling_path_attention.py``, ``_init_weights``,
``initializer_range`` 0.02), about 17 times smaller than PyTorch's default.

The KV cache stores the keys carried through every transform so far (their ``prepare_k_cache``; decoding applies the
new token's transform to them, a rank-one update in place), the values, the log forget gates and w's inputs before
the convolution (its taps read the previous ones). In a packed or padded batch the convolution reads only the
document's own earlier tokens, and padding's transforms are the identity (ops/path.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..ops.masks import compute_dtype
from ..ops.path import document_short_conv, path_attention
from .base import Attention
from .options import KindOptions, non_negative, non_negative_int, option

FORGET_GATE_HELP = (
    "a FoX forget gate: scale * sum_{l=j+1..i} log f_l, f_l = sigmoid(x_l . a_h + b_h), added to the logits "
    "(path_fox; the authors' use_forget_gate)"
)


@dataclass(frozen=True)
class PaTHOptions(KindOptions):
    prefix = "path"
    forget_gate: bool = option(False, FORGET_GATE_HELP)
    w_rank: int = option(
        32,
        "rank of w's projection (d_model -> rank -> d_model, the authors' use_low_rank_w); 0: a full one",
        non_negative_int,
    )
    w_conv_size: int = option(
        3,
        "width of the causal short convolution (depthwise, SiLU) on w within each document; 0: none",
        non_negative_int,
    )
    w_conv_init_std: float = option(
        0.0,
        "initial weights of the short convolution drawn from N(0, std^2) (the authors' model: 0.02); 0: PyTorch's "
        "default (kaiming-uniform, std about 0.33 at width 3)",
        non_negative,
    )


@dataclass(frozen=True)
class PaTHFoXOptions(PaTHOptions):
    """The options of ``path_fox``: PaTH's, the forget gate on."""

    forget_gate: bool = option(True, FORGET_GATE_HELP)


class PaTHAttention(Attention):
    Options = PaTHOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        o = self.options
        if o.w_rank:
            self.w_proj = nn.Sequential(
                nn.Linear(d_model, o.w_rank, bias=False), nn.Linear(o.w_rank, d_model, bias=False)
            )
        else:
            self.w_proj = nn.Linear(d_model, d_model, bias=False)
        self.w_conv = nn.Conv1d(d_model, d_model, o.w_conv_size, groups=d_model, bias=False) if o.w_conv_size else None
        self.beta_proj = nn.Linear(d_model, n_heads, bias=True)
        self.fgate_proj = nn.Linear(d_model, n_heads, bias=True) if o.forget_gate else None

    def post_init(self):
        if self.w_conv is None:
            return
        if self.options.w_conv_init_std:  # the authors' _init_weights: nn.Conv1d as nn.Linear, N(0, 0.02)
            nn.init.normal_(self.w_conv.weight, std=self.options.w_conv_init_std)
        else:  # the generic initialisation sets linear layers only
            self.w_conv.reset_parameters()

    def transform_vectors(self, w_inputs: torch.Tensor, sq: int, segment_ids=None) -> torch.Tensor:
        """Unit vectors w (B, H, Sq, D) in fp32 (fp64 for fp64 input) of the last ``sq`` positions from w's inputs
        (B, d_model, Sk): the projections of every key (with the convolution, which reads earlier ones and runs within
        each document), else of the new positions; then L2 per head."""
        if self.w_conv is not None:
            w_inputs = document_short_conv(w_inputs, self.w_conv.weight[:, 0], self.w_conv.bias, sq, segment_ids)
        w = self.split_heads(w_inputs.transpose(1, 2)).to(compute_dtype(w_inputs.dtype))
        return w * torch.rsqrt(w.pow(2).sum(-1, keepdim=True) + self.norm_eps)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        cdt = compute_dtype(x.dtype)
        beta = 2 * torch.sigmoid(self.beta_proj(x).to(cdt)).transpose(1, 2)  # (B, H, S)
        w_inputs = self.w_proj(x).transpose(1, 2)  # (B, d_model, S)
        extras = {} if self.w_conv is None else {"w_inputs": w_inputs}  # the convolution's taps read earlier ones
        if self.fgate_proj is not None:
            extras["log_fgate"] = F.logsigmoid(self.fgate_proj(x).to(cdt)).transpose(1, 2)
        k, v, extras = self.with_cache(cache, k, v, **extras)
        w = self.transform_vectors(extras.get("w_inputs", w_inputs), x.shape[1], segment_ids)
        out, keys = path_attention(
            q,
            k,
            v,
            w,
            beta,
            extras.get("log_fgate"),
            logit_dropout=self.logit_dropout(),
            segment_ids=segment_ids,
            carried_keys=cache is not None,
        )
        if cache is not None:  # the cached keys carried through the new transforms (written in place)
            cache.keys.copy_(keys)
        return out


class PaTHFoXAttention(PaTHAttention):
    """PaTH with FoX's forget gate (kind ``path_fox``)."""

    Options = PaTHFoXOptions
