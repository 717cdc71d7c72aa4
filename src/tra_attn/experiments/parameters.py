"""How many parameters a run's model has: every page's methods table states it, so that methods are compared at
a parameter count the reader can see. Counted on PyTorch's meta device (no memory, no initialisation)."""

from __future__ import annotations

import functools
import json

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
