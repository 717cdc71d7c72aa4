"""FIRE, functional interpolation for relative positions (Li et al., ICLR 2024, arXiv 2310.04418):

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + f(psi(i - j) / psi(max(L, i)))_h) v_j,  psi(x) = log(|c x| + 1)

with f an MLP 1 -> mlp_width -> n_heads (ReLU) shared by the heads of a layer, c learned (from ``c_init``) and
the threshold L = |m * threshold_init| learned through m (from 1), as in the authors' listing (ops/fire.py).
The MLP keeps PyTorch's default initialisation, the listing's, whatever the model's init scheme.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.fire import fire_attention
from .base import Attention
from .options import (
    RandomPositionsOptions,
    option,
    positive,
    positive_int,
    random_positions_at_eval_option,
    random_positions_option,
)


@dataclass(frozen=True)
class FIREOptions(RandomPositionsOptions):
    prefix = "fire"
    mlp_width: int = option(32, "hidden units of the MLP f", positive_int)
    c_init: float = option(0.1, "initial c of psi(x) = log(|c x| + 1)", positive)
    threshold_init: float = option(512.0, "L0: the threshold L of max(L, i) starts at L0 (learned as m * L0)", positive)
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()


class FIREAttention(Attention):
    Options = FIREOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.mlp_in = nn.Linear(1, self.options.mlp_width)
        self.mlp_out = nn.Linear(self.options.mlp_width, n_heads)
        self.c = nn.Parameter(torch.tensor(self.options.c_init))
        self.threshold_multiplier = nn.Parameter(torch.tensor(1.0))

    def post_init(self) -> None:
        self.mlp_in.reset_parameters()
        self.mlp_out.reset_parameters()

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        threshold = torch.abs(self.threshold_multiplier * self.options.threshold_init)
        mlp = (self.mlp_in.weight, self.mlp_in.bias, self.mlp_out.weight, self.mlp_out.bias)
        return fire_attention(
            q, k, v, self.c, threshold, mlp, positions=positions, segment_ids=segment_ids,
            logit_dropout=self.logit_dropout(),
        )  # fmt: skip
