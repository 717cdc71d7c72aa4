"""The method table: everything a comparison runs, in the order of its tables and plots.

A method is an attention kind (registered in ``layers/``) with some of its options, model fields or
training fields changed, plus how pages show it (label, colour), its default learning rate and a
description. The rows are the kinds themselves (TRA, its ablations, then the baselines), then named
variants, run under the same protocol as the kinds (same budget and seeds, its own learning rate chosen on
validation data), its rows carrying its name.

Variants that differ by a number are families written as grids: ``tra_local{w}`` stands for every
``tra_local2``, ``tra_local8``, ... (an integer, or a number written with ``p`` for the point and ``m``
for a minus: ``tra_surrogate0p5``, ``tra_threshold_m1``), so names stay identifiers and folder names.
Rows named explicitly take precedence over a family. A variant's label is its name and its colour a
stable pick from a palette, unless the row says otherwise.

Adding a method is one row (``register_method(Method(...))``) or one family (``register_family``). A kind
registered in ``layers/`` without a row still runs as a method under its own name at learning rate 1e-3.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..layers import ATTENTION_KINDS

# tab20's colours: a variant without a colour of its own gets one of them, chosen by its name.
PALETTE = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
    "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip
NAME = re.compile(r"[a-z][a-z0-9_]*")
# The TRA ablations: kinds until ModelConfig version 8, options of tra since (layers/tra.py); rows beside the kinds.
TRA_ABLATIONS = ("tra_keygate", "tra_nothreshold", "tra_nodistance")


@dataclass(frozen=True)
class Method:
    """``attention`` with ``options`` (the kind's options), ``model`` (ModelConfig) and ``train`` (TrainConfig)
    fields overriding the preset's.

    label and color: how tables and plots show it (default: the name, and a palette colour chosen by the
    name); lr: its learning rate when the preset has none (see ``preset_lr``); description: what changes, for
    the page's Variants section.
    """

    name: str
    attention: str
    label: str | None = None
    color: str | None = None
    lr: float = 1e-3
    description: str = ""
    options: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.label is None:
            object.__setattr__(self, "label", self.name)
        if self.color is None:
            digest = hashlib.sha1(self.name.encode()).digest()
            object.__setattr__(self, "color", PALETTE[digest[0] % len(PALETTE)])

    @property
    def is_variant(self) -> bool:
        """Whether the method changes its kind (a named variant), rather than being the kind itself (or one of
        the TRA ablations, shown beside the kinds as when they were kinds of their own)."""
        return self.name != self.attention and self.name not in TRA_ABLATIONS

    def fields(self) -> dict:
        """What the method changes, by the names pages show: the kind's options qualified by its prefix
        (``tra_local_window``), then model and training fields."""
        qualified = ATTENTION_KINDS[self.attention].options.qualified
        return {**{qualified(k): v for k, v in self.options.items()}, **self.model, **self.train}


def _check(method: Method) -> Method:
    """``method`` if it is a valid row, else a ValueError naming the field."""
    if not isinstance(method, Method):
        raise TypeError(f"register_method: method = {method!r}; expected a Method")
    name = method.name
    if method.attention not in ATTENTION_KINDS:
        raise ValueError(
            f"register_method: {name}.attention = {method.attention!r}; expected one of {list(ATTENTION_KINDS)}"
        )
    if name in ATTENTION_KINDS and (method.attention != name or method.options or method.model or method.train):
        raise ValueError(f"register_method: {name!r} is an attention kind; expected its row to run it unchanged")
    if not (isinstance(method.lr, (int, float)) and math.isfinite(method.lr) and method.lr > 0):
        raise ValueError(f"register_method: {name}.lr = {method.lr!r}; expected a finite positive learning rate")
    if not all(isinstance(d, dict) for d in (method.options, method.model, method.train)):
        raise TypeError(
            f"register_method: {name}.options, .model and .train = {method.options!r}, {method.model!r}, "
            f"{method.train!r}; expected dicts"
        )
    if "attention_options" in method.model or "attention" in method.model:
        raise ValueError(f"register_method: {name}.model sets the attention; expected it in .attention and .options")
    ATTENTION_KINDS[method.attention].make_options(method.options)  # the kind's options, or an error naming one
    return method


METHODS: dict[str, Method] = {}


def register_method(method: Method, replace: bool = False) -> Method:
    """Add ``method`` to the table; refuses a bad row or name, or an existing name unless ``replace``."""
    _check(method)
    if not NAME.fullmatch(method.name):
        raise ValueError(
            f"register_method: name {method.name!r}; expected lowercase letters, digits and underscores, starting "
            "with a letter (an identifier and a folder name: write 0.5 as 0p5 and -1 as m1)"
        )
    if method.name in METHODS and not replace:
        raise ValueError(f"register_method: {method.name!r} is already registered; pass replace=True to override")
    METHODS[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (for tests and plug-ins that register temporary methods)."""
    METHODS.pop(name, None)


# Numbers inside method names: an integer, or digits with p for the point and an optional leading m (minus).
_VALUE = {int: r"[0-9]+", float: r"m?[0-9]+(?:p[0-9]+)?"}


def parse_value(text: str, kind: type):
    """A number as a method name writes it: ``4`` -> 4, ``0p5`` -> 0.5, ``m1`` -> -1.0 (for a float)."""
    if kind is int:
        return int(text)
    return float(text.replace("m", "-").replace("p", "."))


def format_value(value) -> str:
    """The inverse of ``parse_value``: 4 -> ``4``, 0.5 -> ``0p5``, -1.0 -> ``m1``."""
    return f"{value:g}".replace("-", "m").replace(".", "p")


@dataclass(frozen=True)
class MethodFamily:
    """Methods named by ``pattern`` with typed parameters, e.g. ``MethodFamily("tra_local{w}", "tra",
    {"w": int}, options=lambda w: {"local_window": w}, description=...)``: every name the pattern matches
    is a method. ``options``, ``model``, ``train`` and ``description`` are functions of the parameters."""

    pattern: str
    attention: str
    params: Mapping[str, type]
    options: Callable[..., dict] = lambda **_: {}
    model: Callable[..., dict] = lambda **_: {}
    train: Callable[..., dict] = lambda **_: {}
    description: Callable[..., str] = lambda **_: ""
    lr: float = 1e-3

    def regex(self) -> re.Pattern:
        parts = re.split(r"\{(\w+)\}", self.pattern)
        text = "".join(
            f"(?P<{part}>{_VALUE[self.params[part]]})" if i % 2 else re.escape(part) for i, part in enumerate(parts)
        )
        return re.compile(text)

    def match(self, name: str) -> Method | None:
        """The method ``name`` stands for in this family, or None if the pattern does not match it."""
        found = self.regex().fullmatch(name)
        if found is None:
            return None
        values = {key: parse_value(text, self.params[key]) for key, text in found.groupdict().items()}
        if self.name(**values) != name:  # one spelling per method (tra_local4, not tra_local04): one folder
            return None
        return Method(
            name,
            self.attention,
            lr=self.lr,
            description=self.description(**values),
            options=self.options(**values),
            model=self.model(**values),
            train=self.train(**values),
        )

    def name(self, **values) -> str:
        """The member name of these parameter values: ``name(w=8)`` -> ``tra_local8``."""
        return self.pattern.format(**{key: format_value(value) for key, value in values.items()})


FAMILIES: dict[str, MethodFamily] = {}
# Names written before method names had to be identifiers: they still resolve (old rows and pages use them).
ALIASES: dict[str, str] = {}


def register_family(family: MethodFamily, replace: bool = False) -> MethodFamily:
    """Add a family of methods; refuses a pattern already registered unless ``replace``."""
    if family.attention not in ATTENTION_KINDS:
        raise ValueError(
            f"register_family: {family.pattern}.attention = {family.attention!r}; expected one of "
            f"{list(ATTENTION_KINDS)}"
        )
    placeholders = set(re.findall(r"\{(\w+)\}", family.pattern))
    if placeholders != set(family.params) or not all(t in _VALUE for t in family.params.values()):
        raise ValueError(
            f"register_family: {family.pattern!r} with params {dict(family.params)}; expected one int or float "
            "parameter per {placeholder}"
        )
    if family.pattern in FAMILIES and not replace:
        raise ValueError(f"register_family: {family.pattern!r} is already registered; pass replace=True to override")
    FAMILIES[family.pattern] = family
    return family


def unregister_family(pattern: str) -> None:
    FAMILIES.pop(pattern, None)


for _row in (
    Method("tra", "tra", "TRA", "#d62728"),
    # The TRA ablations: options of the tra kind (layers/tra.py), under the names and labels they had as kinds.
    Method("tra_keygate", "tra", "TRA, gate at key", "#ff9896", options={"gate": "key"},
           description="the forget gate taken at each kept key (FoX-style)"),
    Method("tra_nothreshold", "tra", "TRA, no threshold", "#e377c2", options={"threshold": -math.inf},
           description="every causal key kept: the distance counts all keys (a data-dependent ALiBi)"),
    Method("tra_nodistance", "tra", "TRA, no distance", "#8c564b", options={"distance": False},
           description="the threshold only, no gate and no distance term (NoPE plus sparsity)"),
    Method("nope", "nope", "NoPE", "#7f7f7f"),
    Method("rope", "rope", "RoPE", "#1f77b4"),
    Method("alibi", "alibi", "ALiBi", "#2ca02c"),
    Method("fox", "fox", "FoX", "#ff7f0e"),
    Method("cope", "cope", "CoPE", "#9467bd"),
    Method("t5", "t5", "T5 bias", "#bcbd22"),
    Method("fire", "fire", "FIRE", "#e7ba52"),
    Method("kerple", "kerple", "KERPLE", "#393b79"),
    Method("stickbreaking", "stickbreaking", "stick-breaking", "#8c6d31"),
    Method("ssmax", "ssmax", "SSMax", "#637939"),
    Method("asentmax", "asentmax", "ASEntmax", "#17becf"),
    # Named variants whose wording pages already show (a family below covers the other values).
    Method("fox_paperblock", "fox", description="FoX in the authors' block (x = norm(x); x = x + f(x))",
           model={"block_style": "paper"}),
    Method("tra_paperblock", "tra", description="the authors' block (x = norm(x); x = x + f(x)) instead of pre-norm",
           model={"block_style": "paper"}),
    Method("tra_dense1", "tra", description="the first of the 4 heads of each layer keeps every causal key",
           options={"dense_heads": 1}),
    Method("tra_dense2", "tra", description="the first 2 of the 4 heads of each layer keep every causal key",
           options={"dense_heads": 2}),
    Method("tra_dense1_paperblock", "tra", description="tra_dense1 in the authors' block",
           options={"dense_heads": 1}, model={"block_style": "paper"}),
    Method("tra_gate3", "tra", options={"gate_bias_init": 3.0},
           description="forget-gate bias initialised to 3 (log-gate -0.05: long memory at the start)"),
    Method("tra_surrogate1", "tra", description="tra_surrogate0.5 at temperature 1", options={"keep_surrogate": 1.0}),
    Method("tra_temperature", "tra", description="a learned per-head factor on the scores, initialised to 1",
           options={"learned_temperature": True}),
    Method("entmax", "asentmax", "1.5-entmax", "#9edae5", options={"scaling": "none"},
           description="alpha-entmax (alpha 1.5) without ASEntmax's length scaling: a fixed temperature"),
    Method("tra_warmup", "tra", description="threshold warm-up: every key kept at first, rising in 4 stages to the "
           "exact threshold 0 at step 150", options={"threshold_warmup": 150}),
):  # fmt: skip
    register_method(_row)


def _heads(n: int) -> str:
    return "head" if n == 1 else "heads"


for _family in (
    MethodFamily("tra_dense{n}", "tra", {"n": int}, options=lambda n: {"dense_heads": n},
                 description=lambda n: f"the first {n} {_heads(n)} of each layer keep every causal key"),
    MethodFamily("tra_dense{n}_window{w}", "tra", {"n": int, "w": int},
                 options=lambda n, w: {"dense_heads": n, "dense_window": w},
                 description=lambda n, w: f"tra_dense{n} with the dense {_heads(n)} keeping only the {w} most recent "
                 "keys"),
    MethodFamily("tra_local{w}", "tra", {"w": int}, options=lambda w: {"local_window": w},
                 description=lambda w: f"the {w} most recent keys (the query's own included) always kept and "
                 "counted, whatever their score"),
    MethodFamily("tra_local{w}_dense{n}_window{m}", "tra", {"w": int, "n": int, "m": int},
                 options=lambda w, n, m: {"local_window": w, "dense_heads": n, "dense_window": m},
                 description=lambda w, n, m: f"tra_local{w} in the thresholded heads, and tra_dense{n}_window{m}"),
    MethodFamily("tra_local{w}_surrogate{tau}", "tra", {"w": int, "tau": float},
                 options=lambda w, tau: {"local_window": w, "keep_surrogate": tau},
                 description=lambda w, tau: f"tra_local{w} trained with the keep surrogate of temperature {tau:g} "
                 "(the two mechanisms together)"),
    # The fixes of issue 30 on top of tra_local{w}_surrogate{tau}: varied training lengths, a keep penalty, and
    # a shifted training threshold.
    MethodFamily("tra_local{w}_surrogate{tau}_spread{s}", "tra", {"w": int, "tau": float, "s": float},
                 options=lambda w, tau, s: {"local_window": w, "keep_surrogate": tau},
                 train=lambda w, tau, s: {"length_spread": s},
                 description=lambda w, tau, s: f"tra_local{w}_surrogate{format_value(tau)} trained on packed "
                 f"documents of lengths in [{1 - s:g}, 1] x the training length"),
    MethodFamily("tra_local{w}_surrogate{tau}_penalty{p}", "tra", {"w": int, "tau": float, "p": float},
                 options=lambda w, tau, p: {"local_window": w, "keep_surrogate": tau, "keep_penalty": p},
                 description=lambda w, tau, p: f"tra_local{w}_surrogate{format_value(tau)} with a keep penalty of "
                 f"weight {p:g} (margin 0.5 below the threshold)"),
    MethodFamily("tra_local{w}_surrogate{tau}_shift{t}", "tra", {"w": int, "tau": float, "t": float},
                 options=lambda w, tau, t: {"local_window": w, "keep_surrogate": tau, "threshold_shift": t},
                 description=lambda w, tau, t: f"tra_local{w}_surrogate{format_value(tau)} trained with the "
                 f"threshold shifted by {t:g}"),
    MethodFamily("tra_surrogate{tau}", "tra", {"tau": float}, options=lambda tau: {"keep_surrogate": tau},
                 description=lambda tau: f"a sigmoid straight-through gradient for the keep decision at temperature "
                 f"{tau:g} in training (keys near the threshold get gradient); the forward pass stays exact"),
    MethodFamily("tra_threshold_{t}", "tra", {"t": float}, options=lambda t: {"threshold": t},
                 description=lambda t: f"threshold {t:g} instead of 0"),
):  # fmt: skip
    register_family(_family)


def _random_positions(n: int) -> str:
    return (f"training positions: a sorted random subset of [0, {n}) per row, the same in every layer (randomized "
            "positional encodings); evaluation at 0, 1, ...")  # fmt: skip


def _random_positions_at_eval(n: int) -> str:
    return (f"positions: a sorted random subset of [0, {n}) per row, in training and in evaluation (randomized "
            "positional encodings as their authors evaluate them)")  # fmt: skip


for _kind in ("rope", "alibi", "t5", "fire", "kerple"):
    register_family(MethodFamily(f"{_kind}_random{{n}}", _kind, {"n": int}, options=lambda n: {"random_positions": n},
                                 description=_random_positions))  # fmt: skip
    register_family(MethodFamily(f"{_kind}_random{{n}}_evalrandom", _kind, {"n": int},
                                 options=lambda n: {"random_positions": n, "random_positions_at_eval": True},
                                 description=_random_positions_at_eval))  # fmt: skip

ALIASES.update({"tra_surrogate0.5": "tra_surrogate0p5", "tra_threshold-0.5": "tra_threshold_m0p5",
                "tra_threshold-1": "tra_threshold_m1"})  # fmt: skip


def method_names() -> list[str]:
    """The methods a comparison lists: the table's rows, then the registered kinds without one (any member of
    a family, ``family_patterns()``, is a method too)."""
    return list(METHODS) + [kind for kind in ATTENTION_KINDS if kind not in METHODS]


def family_patterns() -> list[str]:
    return list(FAMILIES)


def resolve_method(name: str) -> Method:
    """The method ``name`` stands for: its row, an alias's method under the alias's name, a family member,
    or a registered kind without a row, unchanged."""
    if not isinstance(name, str):
        raise ValueError(f"method {name!r}; expected a method name")
    if name in METHODS:
        return METHODS[name]
    if name in ALIASES:
        return dataclasses.replace(resolve_method(ALIASES[name]), name=name, label=name)
    for family in FAMILIES.values():
        method = family.match(name)
        if method is not None:
            return _check(method)
    if name in ATTENTION_KINDS:
        return Method(name, name)
    raise ValueError(
        f"method {name!r}; expected a name from {method_names()} or a family member ({', '.join(FAMILIES)})"
    )


def canonical_name(name: str) -> str:
    """The name a method is known by today (an alias's target, else the name itself)."""
    return ALIASES.get(name, name)


def preset_lr(lrs: Mapping[str, float], lr: float | None, method: str) -> float:
    """The learning rate ``method`` trains at under a preset with validated rates ``lrs`` and preset-wide
    rate ``lr``: the first of ``lrs[method]`` (by its name or, for an alias, its target's), ``lrs[its kind]``
    (a variant without a validated rate of its own takes its kind's), ``lr``, and the method's default rate
    (so a newly registered kind or method runs with no preset change)."""
    resolved = resolve_method(method)
    for name in (method, canonical_name(method), resolved.attention):
        if name in lrs:
            return lrs[name]
    return lr if lr is not None else resolved.lr
