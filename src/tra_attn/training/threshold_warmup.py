"""Threshold warm-up: TRA keeps (nearly) every causal key early in training, then its exact threshold.

With the model's threshold t and head dimension D, scores are bounded by |s| <= sqrt(D), so a threshold
of t - sqrt(D) keeps every causal key (for t = 0). Over the first W warm-up steps the threshold rises
from t - sqrt(D) to t in ``LEVELS`` equal stages (a few distinct values, so a compiled model recompiles
a few times, not every step); from step W on it is t. Only training forwards see the lowered threshold:
validation, evaluation and checkpoints always use the model's own, so the trained model is exact TRA.
"""

from __future__ import annotations

import contextlib
import math

from torch import nn

from ..layers.tra import TRAAttention

LEVELS = 4


def warmup_threshold(step: int, warmup_steps: int, threshold: float, head_dim: int) -> float:
    """The threshold TRA layers train with at ``step``: ``threshold`` once warm-up is over."""
    if step >= warmup_steps:
        return threshold
    remaining = 1.0 - math.floor(LEVELS * step / warmup_steps) / LEVELS  # 1, 3/4, 1/2, 1/4
    return threshold - remaining * math.sqrt(head_dim)


def tra_layers(model: nn.Module) -> list[TRAAttention]:
    """The TRA attention layers of ``model`` whose threshold is finite (the ones a warm-up can lower)."""
    return [m for m in model.modules() if isinstance(m, TRAAttention) and math.isfinite(m.threshold)]


@contextlib.contextmanager
def lowered_threshold(model: nn.Module, step: int, warmup_steps: int):
    """Within the block, every TRA layer of ``model`` uses its warm-up threshold of ``step``."""
    layers = tra_layers(model) if step < warmup_steps else []
    saved = [layer.threshold for layer in layers]
    try:
        for layer in layers:
            layer.threshold = warmup_threshold(step, warmup_steps, layer.threshold, layer.head_dim)
        yield
    finally:
        for layer, threshold in zip(layers, saved):
            layer.threshold = threshold
