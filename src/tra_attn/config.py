"""Model configuration: one dataclass, serialised to JSON next to every checkpoint and result."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass


def dataclass_from_dict(cls, data: dict):
    """``cls(**data)``, refusing keys that are not fields of ``cls`` with an error that names them."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown fields {unknown}; expected a subset of {sorted(known)}")
    return cls(**data)


@dataclass
class ModelConfig:
    """Decoder-only language model; ``attention`` picks the attention layer by registry name."""

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    attention: str = "tra"
    block_style: str = "prenorm"  # "prenorm" or "paper" (x = norm(x); x = x + f(x), as in the TRA notebook)
    mlp_ratio: float = 2.0  # SwiGLU hidden width / d_model (the notebook's d -> 4d split into two halves)
    mlp_bias: bool = True
    dropout: float = 0.0  # on embeddings, attention outputs and the MLP hidden layer
    norm_eps: float = 1e-6
    init_std: float = 0.02
    gate_bias_init: float = 0.0  # initial bias of the TRA / FoX forget-gate projections
    tra_threshold: float = 0.0
    tra_impl: str = "auto"
    rope_base: float = 10000.0
    cope_max_pos: int = 64

    def __post_init__(self):
        from .layers import ATTENTION_LAYERS  # deferred: the layers import this module
        from .ops.tra import IMPLS

        def fail(field: str, expected: str):
            raise ValueError(f"ModelConfig.{field} = {getattr(self, field)!r}; expected {expected}")

        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "cope_max_pos"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                fail(field, "a positive integer")
        if self.d_model % self.n_heads:
            fail("d_model", f"a multiple of n_heads = {self.n_heads}")
        if (self.d_model // self.n_heads) % 2 and self.attention == "rope":
            fail("d_model", "an even head dimension d_model / n_heads for RoPE")
        if self.attention not in ATTENTION_LAYERS:
            fail("attention", f"one of {sorted(ATTENTION_LAYERS)}")
        if self.block_style not in ("prenorm", "paper"):
            fail("block_style", "'prenorm' or 'paper'")
        if not 0.0 <= self.dropout < 1.0:
            fail("dropout", "a probability in [0, 1)")
        for field in ("mlp_ratio", "norm_eps", "init_std", "rope_base"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                fail(field, "a finite positive number")
        if not isinstance(self.tra_threshold, (int, float)) or math.isnan(self.tra_threshold):
            fail("tra_threshold", "a number")
        if self.tra_impl not in IMPLS:
            fail("tra_impl", f"one of {IMPLS}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        return dataclass_from_dict(cls, data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)
