"""KERPLE-log (Chi, Fan, Ramadge, Rudnicky, NeurIPS 2022, arXiv 2205.09921):

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) - r1_h log(1 + r2_h (i - j))) v_j

with r1, r2 learned per head, drawn from U(0, r1_init) and U(0, r2_init) (the authors': U(0, 2), U(0, 1)) and
kept >= 0.01 as the authors keep them: their forward clamps the parameters in place; here the forward uses the
clamped values with the gradient passed straight through to the parameter (the same step on a clamped value).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.kerple import kerple_attention
from .base import Attention
from .options import (
    RandomPositionsOptions,
    option,
    positive,
    random_positions_at_eval_option,
    random_positions_option,
)

FLOOR = 1e-2  # the authors' eps: r1 and r2 never go below it


def floored(p: torch.Tensor) -> torch.Tensor:
    """max(p, FLOOR) in the forward, the identity in the backward."""
    return p.detach().clamp(min=FLOOR) + (p - p.detach())  # the second term: exactly 0, gradient 1


@dataclass(frozen=True)
class KERPLEOptions(RandomPositionsOptions):
    prefix = "kerple"
    r1_init: float = option(2.0, "r1 (the log kernel's scale) starts uniform in (0, r1_init) per head", positive)
    r2_init: float = option(1.0, "r2 (the distance's scale) starts uniform in (0, r2_init) per head", positive)
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()


class KERPLEAttention(Attention):
    Options = KERPLEOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.r1 = nn.Parameter(torch.rand(n_heads) * self.options.r1_init)
        self.r2 = nn.Parameter(torch.rand(n_heads) * self.options.r2_init)

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        return kerple_attention(
            q, k, v, floored(self.r1), floored(self.r2), positions=positions, segment_ids=segment_ids,
            logit_dropout=self.logit_dropout(),
        )  # fmt: skip
