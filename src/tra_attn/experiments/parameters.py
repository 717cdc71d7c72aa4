"""How many parameters a run's model has: every page's methods table states it, so that methods are compared at
a parameter count the reader can see; and the MLP width that brings a model to another's count (a question's
``match_parameters``). Counted on PyTorch's meta device (no memory, no initialisation)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import torch

from ..models import ModelConfig, TransformerLM


@functools.cache
def _count(model_json: str) -> int:
    config = ModelConfig.from_dict(json.loads(model_json))
    with torch.device("meta"):
        model = TransformerLM(config)
    return sum(p.numel() for p in model.parameters())


def parameter_count(config: dict) -> int:
    """The parameters of the model of a run's training config (a record's ``config``), tied weights once."""
    return _count(json.dumps(config["model"], sort_keys=True))


MATCH_TOLERANCE = 0.02  # matched models are within 2% of the reference's parameters


def model_parameters(model: ModelConfig) -> int:
    """The parameters of a model config's model, tied weights once."""
    return _count(json.dumps(model.to_dict(), sort_keys=True))


def with_mlp_width(model: ModelConfig, width: int) -> ModelConfig:
    """``model`` with an MLP ``width`` wide: the ``mlp_ratio`` that builds exactly that width."""
    matched = dataclasses.replace(model, mlp_ratio=width / model.d_model)
    if matched.mlp_width != width:  # a ratio that float rounding puts just below the width
        matched = dataclasses.replace(model, mlp_ratio=math.nextafter(matched.mlp_ratio, math.inf))
    return matched


def matched_mlp(model: ModelConfig, target: int, what: str) -> ModelConfig:
    """``model`` with the MLP width whose parameter count is nearest ``target``, or a ValueError naming ``what``
    where no width comes within MATCH_TOLERANCE of it. The count grows by the same amount per unit of width, so two
    counts give the width."""
    narrow, wide = model_parameters(with_mlp_width(model, 1)), model_parameters(with_mlp_width(model, 2))
    width = max(1, round(1 + (target - narrow) / (wide - narrow)))
    matched = with_mlp_width(model, width)
    count = model_parameters(matched)
    if abs(count - target) > MATCH_TOLERANCE * target:
        raise ValueError(
            f"{what}: {count:,} parameters at the MLP width nearest {target:,} ({width}); expected a width that "
            f"comes within {MATCH_TOLERANCE:.0%} of it (its model outside the MLP is too large: match fewer methods, "
            "or give it a model of its own)"
        )
    return matched
