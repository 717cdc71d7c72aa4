"""A row's bits per byte at each evaluation length: its stage's model (with the row's RoPE scaling at factor = the
evaluation length / the training length, the factor that targets that length) on the same scored tokens at every
length; and a continuation's selection value, at the training length on the tokens before them. Each is cached by
the stage's id and what is scored."""

from __future__ import annotations

import numpy as np

from .plan import VERSION, Row
from .presets import FACTORS
from .scaling import rope_scaled
from .scoring import bits_per_byte
from .stages import Stage, StageCache


def row_values(
    row: Row, cache: StageCache, tokens: np.ndarray, token_bytes: np.ndarray, train_length: int, scored: dict
) -> dict[int, float]:
    """{factor: bits per byte} of ``row`` on ``tokens`` (``scored``: what they are, for the cache's key)."""
    spec = {"version": VERSION, "stage": row.stage.id, "scaling": row.scaling, "factors": FACTORS, "scored": scored}

    def compute() -> dict:
        model = cache.model(row.stage)
        values = {}
        for factor in FACTORS:
            scaled = model if row.scaling is None else rope_scaled(model, row.scaling, factor, train_length)
            values[str(factor)] = bits_per_byte(scaled, tokens, factor * train_length, token_bytes)
        return values

    name = f"eval_{row.stage.name}" + (f"_{row.scaling}" if row.scaling else "")
    return {int(factor): value for factor, value in cache.result(name, spec, compute).items()}


def selection_value(
    stage: Stage, cache: StageCache, tokens: np.ndarray, token_bytes: np.ndarray, train_length: int, scored: dict
) -> float:
    """Bits per byte of ``stage``'s model at the training length on the selection ``tokens`` (``scored``: what they
    are): the value a continuation's rate is chosen by."""
    spec = {"version": VERSION, "stage": stage.id, "selection": scored}

    def compute() -> dict:
        return {"bits_per_byte": bits_per_byte(cache.model(stage), tokens, train_length, token_bytes)}

    return cache.result(f"select_{stage.name}", spec, compute)["bits_per_byte"]
