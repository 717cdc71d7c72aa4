"""KERPLE-log (Chi, Fan, Ramadge, Rudnicky, NeurIPS 2022, arXiv 2205.09921):

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) - r1_h log(1 + r2_h (i - j))) v_j

with r1, r2 learned per head, drawn from U(0, r1_init) and U(0, r2_init) (the authors': U(0, 2), U(0, 1)) and
kept >= 0.01 (the authors' eps). As the authors' code (chijames/KERPLE, commit
25be3d712e96a3353b374f1f8e36b97d86f97ffa):

- ``shared`` (the default): one (r1, r2) for all the layers of a model: ``megatron/model/gpt2_model.py`` builds one
  ``ParallelKerpleLog`` (``megatron/mpu/layers.py``) and passes it to every layer as ``rpe``.
- ``clamp = "in_place"`` (the default): before using them, every forward clamps the stored r1 and r2 to >= eps
  (their ``self.bias_p.data = self.bias_p.data.clamp(min=self.eps)``, the same for bias_a), outside autograd, so
  an optimizer step that takes one below eps is undone at the next forward, and the next step starts from eps.
  ``"straight_through"``: the stored values are never changed; the forward uses max(p, eps) with the gradient
  passed straight through to p (which may then stay below eps).

``shared=False, clamp="straight_through"`` is this library's former kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.kerple import kerple_attention
from .base import Attention
from .options import (
    RandomPositionsOptions,
    one_of,
    option,
    positive,
    random_positions_at_eval_option,
    random_positions_option,
)

FLOOR = 1e-2  # the authors' eps: r1 and r2 never go below it
CLAMPS = ("in_place", "straight_through")  # the values of the option clamp


def floored(p: torch.Tensor) -> torch.Tensor:
    """max(p, FLOOR) in the forward, the identity in the backward."""
    return p.detach().clamp(min=FLOOR) + (p - p.detach())  # the second term: exactly 0, gradient 1


def clamped_in_place(p: torch.Tensor) -> torch.Tensor:
    """``p`` after setting its stored values to max(p, FLOOR), as the authors' forward does. Through ``.data``, so
    autograd sees no in-place change: a parameter shared across layers is clamped by each of them, after the layers
    before have saved it for their backward (at values the clamp leaves unchanged)."""
    p.data.clamp_(min=FLOOR)
    return p


@dataclass(frozen=True)
class KERPLEOptions(RandomPositionsOptions):
    prefix = "kerple"
    r1_init: float = option(2.0, "r1 (the log kernel's scale) starts uniform in (0, r1_init) per head", positive)
    r2_init: float = option(1.0, "r2 (the distance's scale) starts uniform in (0, r2_init) per head", positive)
    shared: bool = option(True, "one (r1, r2) for all layers, as the authors (false: a pair per layer)")
    clamp: str = option(
        "in_place",
        "how r1, r2 stay >= 0.01: in_place (the authors': each forward clamps the stored values) or "
        "straight_through (the forward uses the clamped values, the gradient passes to the stored ones)",
        one_of(*CLAMPS),
    )
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()


class KERPLEAttention(Attention):
    Options = KERPLEOptions

    @classmethod
    def shared_parameters(cls, options: KERPLEOptions) -> tuple[str, ...]:
        return ("r1", "r2") if options.shared else ()

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.r1 = nn.Parameter(torch.rand(n_heads) * self.options.r1_init)
        self.r2 = nn.Parameter(torch.rand(n_heads) * self.options.r2_init)

    def on_train_step(self, step: int) -> None:
        """With ``clamp = "in_place"``, the stored r1 and r2 are clamped before each step's forwards as well: where the
        forward sees copies of them (FSDP's gathered parameters), the stored ones still start each step from eps."""
        if self.options.clamp == "in_place":
            clamped_in_place(self.r1)
            clamped_in_place(self.r2)

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        floor = clamped_in_place if self.options.clamp == "in_place" else floored
        return kerple_attention(
            q, k, v, floor(self.r1), floor(self.r2), positions=positions, segment_ids=segment_ids,
            logit_dropout=self.logit_dropout(),
        )  # fmt: skip
