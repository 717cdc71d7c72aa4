"""alpha-entmax attention with ASEntmax's length scaling (Vasylenko, Pitorro, Martins, Treviso 2025, arXiv
2506.16640): sparse attention whose exact zeros make it the closest rival to TRA's selective sparsity.

    theta_i = 1 + softplus(w_b . x_i + b_b) log(n_i + 1) ^ (2 tanh(w_g . x_i + b_g))   (per head, n_i = i + 1)
    out_i   = sum_j alpha-entmax_j(theta_i q_i . k_j / sqrt(D)) v_j

The authors' ASEntmax ("adapt-softplus-tanh" with projection biases, alpha = 1.5, in their ``asentmax``
repository); ``scaling="none"`` is plain alpha-entmax, their fixed-temperature baseline. n_i counts the keys
query i sees within its document. Their models add NAPE/RoPE positions; here, as for every kind, the attention
alone: no positional encoding. alpha is fixed (not learned), as theirs. Math in ops/asentmax.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..ops.asentmax import IMPLS, asentmax_query_scale, entmax_attention
from ..ops.masks import compute_dtype
from ..ops.rows import key_counts
from .base import Attention
from .options import KindOptions, one_of, option


def entmax_alpha(value) -> str | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 1 < value <= 2
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
    impl: str = option(
        "auto", "op implementation: auto (chunked), naive (materialised), chunked (blocks of rows)", one_of(*IMPLS)
    )

    def check(self) -> None:
        if self.scaling == "none" and (self.beta_bias_init or self.gamma_bias_init):
            raise ValueError(
                f"{self.describe('scaling')} = 'none' with beta_bias_init = {self.beta_bias_init}, gamma_bias_init = "
                f"{self.gamma_bias_init}; expected both 0 (they initialise the adaptive scaling)"
            )


class ASEntmaxAttention(Attention):
    Options = ASEntmaxOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.adaptive = self.options.scaling == "adaptive"
        if self.adaptive:
            self.beta_proj = nn.Linear(d_model, n_heads, bias=True)
            self.gamma_proj = nn.Linear(d_model, n_heads, bias=True)
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
            q = q * theta[..., None].to(q.dtype)
        k, v, _ = self.with_cache(cache, k, v)
        o, dropout = self.options, self.logit_dropout()
        return entmax_attention(q, k, v, alpha=o.alpha, impl=o.impl, logit_dropout=dropout, segment_ids=segment_ids)
