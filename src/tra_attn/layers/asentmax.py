"""alpha-entmax attention with ASEntmax's length scaling (Vasylenko, Pitorro, Martins, Treviso 2025, arXiv
2506.16640): sparse attention whose exact zeros make it the closest rival to TRA's selective sparsity.

    theta_i = 1 + softplus(w_b . x_i + b_b) log(n_i + 1) ^ (2 tanh(w_g . x_i + b_g))   (per head, n_i = i + 1)
    out_i   = sum_j alpha-entmax_j(theta_i q_i . k_j / sqrt(D) - m_h (i - j)) v_j

The authors' ASEntmax ("adapt-softplus-tanh" with projection biases, alpha = 1.5) with the positions of their
models, NAPE (``nape``, the default): deep-spin/asentmax, ``synthetic/src/models/architectures/sparse_gemma.py``
(``SparseGemma2Attention``, ``get_nape_slopes``, ``make_bias_tensor``) at commit
be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d, run with ``configs/model/sparse_gemma.yaml``'s ``apply_nape: True``,
``apply_rotary: False``. The first H // 2 heads are ALiBi heads, slopes m_h = 1/1, 1/2, ..., 1/(H // 2) (their
"linear" slopes, fixed, not scaled by length), and keep theta_i = 1; the other H - H // 2 heads are NoPE heads
(m_h = 0) with the length scaling (its projections have H - H // 2 outputs). Every head is alpha-entmax, the ALiBi
ones too (one ``entmax_bisect``, or one adasplash kernel, over all heads). An odd H splits as theirs does (H = 3:
one ALiBi head, two scaled NoPE heads; H = 1: no ALiBi head). i - j is counted within the query's document.
``nape=False``: every head NoPE and scaled, no positional encoding (this library's first version).

``scaling="none"`` is plain alpha-entmax, their fixed-temperature baseline. n_i counts the keys query i sees
within its document. alpha is fixed (not learned), as theirs. Math in ops/asentmax.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.asentmax import asentmax_query_scale, entmax_attention
from ..ops.logit_dropout import IMPLS
from ..ops.masks import compute_dtype
from ..ops.rows import key_counts
from ..utils.checks import is_number
from .base import Attention
from .options import KindOptions, one_of, option


def entmax_alpha(value) -> str | None:
    ok = is_number(value) and 1 < value <= 2
    return None if ok else "a number in (1, 2] (1 would be softmax, 2 is sparsemax)"


@dataclass(frozen=True)
class ASEntmaxOptions(KindOptions):
    prefix = "asentmax"
    alpha: float = option(1.5, "entmax's alpha, fixed: sparser towards 2 (sparsemax); the authors' 1.5", entmax_alpha)
    scaling: str = option(
        "adaptive",
        "'adaptive': ASEntmax's per-query scale 1 + softplus(w.x + b) log(n + 1)^(2 tanh(w'.x + b')); 'none': plain "
        "alpha-entmax",
        one_of("adaptive", "none"),
    )
    beta_bias_init: float = option(0.0, "initial bias b of the scale's softplus(w.x + b) (0: log 2)")
    gamma_bias_init: float = option(0.0, "initial bias b' of the exponent's 2 tanh(w'.x + b') (0: exponent 0)")
    nape: bool = option(
        True,
        "the authors' models' positions (NAPE): the first n_heads // 2 heads add ALiBi biases with slopes 1, 1/2, ... "
        "and are not length-scaled, the others are scaled NoPE heads; false: every head NoPE and scaled",
    )
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )

    def check(self) -> None:
        if self.scaling == "none" and (self.beta_bias_init or self.gamma_bias_init):
            raise ValueError(
                f"{self.describe('scaling')} = 'none' with beta_bias_init = {self.beta_bias_init}, gamma_bias_init = "
                f"{self.gamma_bias_init}; expected both 0 (they initialise the adaptive scaling)"
            )


def nape_slopes(n_heads: int) -> torch.Tensor:
    """(H,) NAPE's ALiBi slopes: 1/1, 1/2, ..., 1/(H // 2) on the first H // 2 heads, 0 on the others (the authors'
    ``get_nape_slopes`` with its defaults, ``alibi_num_heads = H // 2`` and "linear" slopes)."""
    alibi = n_heads // 2
    return torch.cat((1 / torch.arange(1, alibi + 1, dtype=torch.float32), torch.zeros(n_heads - alibi)))


class ASEntmaxAttention(Attention):
    Options = ASEntmaxOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.adaptive = self.options.scaling == "adaptive"
        # NAPE: the first alibi_heads heads are ALiBi heads, not length-scaled; the last scaled_heads are scaled
        self.alibi_heads = n_heads // 2 if self.options.nape else 0
        scaled_heads = n_heads - self.alibi_heads
        if self.adaptive:
            self.beta_proj = nn.Linear(d_model, scaled_heads, bias=True)
            self.gamma_proj = nn.Linear(d_model, scaled_heads, bias=True)
        slopes = nape_slopes(n_heads) if self.options.nape else None
        self.register_buffer("slopes", slopes, persistent=False)
        self.post_init()

    def post_init(self):
        if self.adaptive:
            nn.init.constant_(self.beta_proj.bias, self.options.beta_bias_init)
            nn.init.constant_(self.gamma_proj.bias, self.options.gamma_bias_init)

    def attend(self, x, q, k, v, cache, segment_ids=None):
        if self.adaptive:
            n = key_counts(q.shape[-2], self.past_length(cache), segment_ids, q.device)
            cdt = compute_dtype(q.dtype)
            theta = asentmax_query_scale(self.beta_proj(x).to(cdt), self.gamma_proj(x).to(cdt), n)
            theta, a = theta[..., None].to(q.dtype), self.alibi_heads
            q = torch.cat((q[:, :a], q[:, a:] * theta), dim=1) if a else q * theta
        k, v, _ = self.with_cache(cache, k, v)
        o, dropout = self.options, self.logit_dropout()
        return entmax_attention(
            q, k, v, alpha=o.alpha, impl=o.impl, logit_dropout=dropout, segment_ids=segment_ids, slopes=self.slopes
        )
