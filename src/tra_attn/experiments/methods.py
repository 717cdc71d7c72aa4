"""The method table: everything a comparison runs, one row each, in the order of its tables and plots.

A method is an attention kind (registered in ``layers/``) with some model or training fields changed,
plus how pages show it (label, colour), its default learning rate and a description. The rows are the
kinds themselves (TRA, its ablations, then the baselines), then the named variants: an ablation run as a
method of its own (``--methods tra tra_warmup``), under the same protocol as the kinds (same budget and
seeds, its own learning rate chosen on validation data), its rows carrying its name. A TRA variant is
evaluated as the TRA op with its own threshold, dense heads and windows; the warm-up and the keep surrogate
change training only.

Adding a method is one row (``register_method(Method(...))`` for a plug-in). A kind registered in
``layers/`` without a row still runs as a method: label its name, no colour, learning rate 1e-3, so a
newly registered kind runs with no preset change.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ..layers import ATTENTION_KINDS


@dataclass(frozen=True)
class Method:
    """``attention`` with ``model`` (ModelConfig) and ``train`` (TrainConfig) fields overriding the preset's.

    label and color: how tables and plots show it (no colour: the plot's next); lr: its learning rate when
    the preset has none (see ``preset_lr``); description: what changes, for the page's Variants section.
    """

    name: str
    attention: str
    label: str
    color: str | None
    lr: float = 1e-3
    description: str = ""
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)


METHODS: dict[str, Method] = {}


def register_method(method: Method, replace: bool = False) -> Method:
    """Add ``method`` to the table; refuses a bad row, or an existing name unless ``replace``."""
    if not isinstance(method, Method):
        raise TypeError(f"register_method: method = {method!r}; expected a Method")
    name = method.name
    if method.attention not in ATTENTION_KINDS:
        raise ValueError(
            f"register_method: {name}.attention = {method.attention!r}; expected one of {list(ATTENTION_KINDS)}"
        )
    if name in ATTENTION_KINDS and (method.attention != name or method.model or method.train):
        raise ValueError(f"register_method: {name!r} is an attention kind; expected its row to run it unchanged")
    if not (isinstance(method.lr, (int, float)) and math.isfinite(method.lr) and method.lr > 0):
        raise ValueError(f"register_method: {name}.lr = {method.lr!r}; expected a finite positive learning rate")
    if not (isinstance(method.model, dict) and isinstance(method.train, dict)):
        raise TypeError(
            f"register_method: {name}.model and .train = {method.model!r}, {method.train!r}; expected dicts"
        )
    if name in METHODS and not replace:
        raise ValueError(f"register_method: {name!r} is already registered; pass replace=True to override")
    METHODS[name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (for tests and plug-ins that register temporary methods)."""
    METHODS.pop(name, None)


for _row in (
    Method("tra", "tra", "TRA", "#d62728"),
    Method("tra_keygate", "tra_keygate", "TRA, gate at key", "#ff9896"),
    Method("tra_nothreshold", "tra_nothreshold", "TRA, no threshold", "#e377c2"),
    Method("tra_nodistance", "tra_nodistance", "TRA, no distance", "#8c564b"),
    Method("nope", "nope", "NoPE", "#7f7f7f"),
    Method("rope", "rope", "RoPE", "#1f77b4"),
    Method("alibi", "alibi", "ALiBi", "#2ca02c"),
    Method("fox", "fox", "FoX", "#ff7f0e"),
    Method("cope", "cope", "CoPE", "#9467bd"),
    # The named variants; the label is the name, as committed pages show it. The same block change for a
    # baseline (fox_paperblock): whether the block helps TRA in particular or every kind.
    Method(
        "fox_paperblock",
        "fox",
        "fox_paperblock",
        "#ffbb78",
        description="FoX in the authors' block (x = norm(x); x = x + f(x))",
        model={"block_style": "paper"},
    ),
    Method(
        "tra_dense1",
        "tra",
        "tra_dense1",
        "#bcbd22",
        description="the first of the 4 heads of each layer keeps every causal key",
        model={"tra_dense_heads": 1},
    ),
    Method(
        "tra_dense1_paperblock",
        "tra",
        "tra_dense1_paperblock",
        "#dbdb8d",
        description="tra_dense1 in the authors' block",
        model={"tra_dense_heads": 1, "block_style": "paper"},
    ),
    Method(
        "tra_dense1_window16",
        "tra",
        "tra_dense1_window16",
        "#17becf",
        description="tra_dense1 with the dense head keeping only the 16 most recent keys",
        model={"tra_dense_heads": 1, "tra_dense_window": 16},
    ),
    Method(
        "tra_dense2",
        "tra",
        "tra_dense2",
        "#98df8a",
        description="the first 2 of the 4 heads of each layer keep every causal key",
        model={"tra_dense_heads": 2},
    ),
    Method(
        "tra_dense2_window16",
        "tra",
        "tra_dense2_window16",
        "#393b79",
        description="tra_dense2 with the dense heads keeping only the 16 most recent keys",
        model={"tra_dense_heads": 2, "tra_dense_window": 16},
    ),
    Method(
        "tra_gate3",
        "tra",
        "tra_gate3",
        "#c49c94",
        description="forget-gate bias initialised to 3 (log-gate -0.05: long memory at the start)",
        model={"gate_bias_init": 3.0},
    ),
    Method(
        "tra_local2",
        "tra",
        "tra_local2",
        "#637939",
        description="the 2 most recent keys (the query's own included) always kept and counted, whatever their score",
        model={"tra_local_window": 2},
    ),
    Method(
        "tra_local2_dense1_window16",
        "tra",
        "tra_local2_dense1_window16",
        "#8c6d31",
        description="tra_local2 in the thresholded heads, and tra_dense1_window16",
        model={"tra_local_window": 2, "tra_dense_heads": 1, "tra_dense_window": 16},
    ),
    Method(
        "tra_local4",
        "tra",
        "tra_local4",
        "#843c39",
        description="the 4 most recent keys (the query's own included) always kept and counted, whatever their score",
        model={"tra_local_window": 4},
    ),
    Method(
        "tra_local4_surrogate1",
        "tra",
        "tra_local4_surrogate1",
        "#e7969c",
        description="tra_local4 trained with the keep surrogate of temperature 1 (the two mechanisms together)",
        model={"tra_local_window": 4, "tra_keep_surrogate": 1.0},
    ),
    Method(
        "tra_paperblock",
        "tra",
        "tra_paperblock",
        "#f7b6d2",
        description="the authors' block (x = norm(x); x = x + f(x)) instead of pre-norm",
        model={"block_style": "paper"},
    ),
    Method(
        "tra_surrogate0.5",
        "tra",
        "tra_surrogate0.5",
        "#5254a3",
        description="a sigmoid straight-through gradient for the keep decision at temperature 0.5 in training "
        "(keys near the threshold get gradient); the forward pass stays exact",
        model={"tra_keep_surrogate": 0.5},
    ),
    Method(
        "tra_surrogate1",
        "tra",
        "tra_surrogate1",
        "#6b6ecf",
        description="tra_surrogate0.5 at temperature 1",
        model={"tra_keep_surrogate": 1.0},
    ),
    Method(
        "tra_temperature",
        "tra",
        "tra_temperature",
        "#c5b0d5",
        description="a learned per-head factor on the scores, initialised to 1",
        model={"tra_learned_temperature": True},
    ),
    Method(
        "tra_threshold-0.5",
        "tra",
        "tra_threshold-0.5",
        "#aec7e8",
        description="threshold -0.5 instead of 0",
        model={"tra_threshold": -0.5},
    ),
    Method(
        "tra_threshold-1",
        "tra",
        "tra_threshold-1",
        "#9edae5",
        description="threshold -1 instead of 0",
        model={"tra_threshold": -1.0},
    ),
    Method(
        "tra_warmup",
        "tra",
        "tra_warmup",
        "#c7c7c7",
        description="threshold warm-up: every key kept at first, rising in 4 stages to the exact threshold 0 "
        "at step 150",
        model={"tra_threshold_warmup": 150},
    ),
):
    register_method(_row)


def method_names() -> list[str]:
    """Every name a comparison accepts as a method: the table's, then the registered kinds without a row."""
    return list(METHODS) + [kind for kind in ATTENTION_KINDS if kind not in METHODS]


def resolve_method(name: str) -> Method:
    """The method ``name`` stands for: its row, or for a registered kind without one, the kind unchanged."""
    if name in METHODS:
        return METHODS[name]
    if name in ATTENTION_KINDS:
        return Method(name, name, name, None)
    raise ValueError(f"method {name!r}; expected a name from {method_names()}")


class _Variants(Mapping[str, Method]):
    """The table's named variants (rows not named after their kind), read live so a plug-in's row is one."""

    def __getitem__(self, name: str) -> Method:
        method = METHODS[name]
        if method.name == method.attention:
            raise KeyError(name)
        return method

    def __iter__(self) -> Iterator[str]:
        return (name for name, method in METHODS.items() if name != method.attention)

    def __len__(self) -> int:
        return sum(1 for _ in self)


VARIANTS: Mapping[str, Method] = _Variants()


def preset_lr(lrs: Mapping[str, float], lr: float | None, method: str) -> float:
    """The learning rate ``method`` trains at under a preset with validated rates ``lrs`` and preset-wide
    rate ``lr``: the first of ``lrs[method]``, ``lrs[its kind]`` (a variant without a validated rate of its
    own takes its kind's), ``lr``, and the method's default rate (so a newly registered kind or method runs
    with no preset change)."""
    method = resolve_method(method)
    for name in (method.name, method.attention):
        if name in lrs:
            return lrs[name]
    return lr if lr is not None else method.lr
