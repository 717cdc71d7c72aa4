"""Named variants: an attention kind with some model or training fields changed, run as a method of its own.

Comparisons take a variant name wherever they take an attention kind (``--methods tra tra_warmup``), so
an ablation runs under the same protocol as the kinds (same budget and seeds, its own learning rate
chosen on validation data) and its rows carry its name. A TRA variant is evaluated as the TRA op with
its own threshold and dense heads; the warm-up changes training only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..layers import ATTENTION_KINDS


@dataclass(frozen=True)
class Variant:
    """``attention`` with ``model`` (ModelConfig) and ``train`` (TrainConfig) fields overriding the preset's."""

    attention: str
    description: str
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)


VARIANTS: dict[str, Variant] = {
    "tra_threshold-0.5": Variant("tra", "threshold -0.5 instead of 0", model={"tra_threshold": -0.5}),
    "tra_threshold-1": Variant("tra", "threshold -1 instead of 0", model={"tra_threshold": -1.0}),
    "tra_dense1": Variant(
        "tra", "the first of the 4 heads of each layer keeps every causal key", model={"tra_dense_heads": 1}
    ),
    "tra_dense2": Variant(
        "tra", "the first 2 of the 4 heads of each layer keep every causal key", model={"tra_dense_heads": 2}
    ),
    "tra_warmup": Variant(
        "tra",
        "threshold warm-up: every key kept at first, rising in 4 stages to the exact threshold 0 at step 150",
        model={"tra_threshold_warmup": 150},
    ),
    "tra_temperature": Variant(
        "tra", "a learned per-head factor on the scores, initialised to 1", model={"tra_learned_temperature": True}
    ),
    "tra_gate3": Variant(
        "tra",
        "forget-gate bias initialised to 3 (log-gate -0.05: long memory at the start)",
        model={"gate_bias_init": 3.0},
    ),
    "tra_paperblock": Variant(
        "tra", "the authors' block (x = norm(x); x = x + f(x)) instead of pre-norm", model={"block_style": "paper"}
    ),
    "tra_dense1_paperblock": Variant(
        "tra",
        "tra_dense1 in the authors' block",
        model={"tra_dense_heads": 1, "block_style": "paper"},
    ),
    # The same block change for a baseline: whether the block helps TRA in particular or every kind.
    "fox_paperblock": Variant(
        "fox", "FoX in the authors' block (x = norm(x); x = x + f(x))", model={"block_style": "paper"}
    ),
}


def method_names() -> list[str]:
    """Every name a comparison accepts as a method: the registered attention kinds, then the variants."""
    return list(ATTENTION_KINDS) + list(VARIANTS)


def resolve_method(method: str) -> Variant:
    """The variant a method name stands for (a registered kind is the variant that changes nothing)."""
    if method in VARIANTS:
        return VARIANTS[method]
    if method in ATTENTION_KINDS:
        return Variant(method, ATTENTION_KINDS[method].label)
    raise ValueError(f"method {method!r}; expected a name from {method_names()}")
