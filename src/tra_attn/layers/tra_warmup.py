"""Threshold warm-up: TRA keeps (nearly) every causal key early in training, then its exact threshold.

With the model's threshold t and head dimension D, scores are bounded by |s| <= sqrt(D), so a threshold
of t - sqrt(D) keeps every causal key (for t = 0). Over the first W warm-up steps
(TRA's option ``threshold_warmup``) the threshold rises from t - sqrt(D) to t in ``LEVELS`` equal stages
(a few distinct values, so a compiled model recompiles a few times, not every step); from step W on it is
t. Only training forwards see the lowered threshold (the TRA layer's ``on_train_step`` sets it, called
through ``TransformerLM.set_train_step``): validation, evaluation and checkpoints always use the model's
own, so the trained model is exact TRA.
"""

from __future__ import annotations

import math

LEVELS = 4


def warmup_threshold(step: int, warmup_steps: int, threshold: float, head_dim: int) -> float:
    """The threshold TRA layers train with at ``step``: ``threshold`` once warm-up is over."""
    if step >= warmup_steps:
        return threshold
    remaining = 1.0 - math.floor(LEVELS * step / warmup_steps) / LEVELS  # 1, 3/4, 1/2, 1/4
    return threshold - remaining * math.sqrt(head_dim)
