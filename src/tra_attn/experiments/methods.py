"""A method: an attention kind with some of its options, model fields and training aids; what a question compares.

A method is data, written in a spec (``results/<question>/spec.py``) as ``Method("tra", options={"local_window":
4})``. Its label is derived from what it changes (``TRA (local_window=4)``) unless given, its colour is its
kind's or a stable pick from a palette. Nothing parses a method from a name: rows, runs and pages hold its
fields. A kind registered in ``layers/`` (a user's own) is a method as soon as a spec names it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from ..layers import ATTENTION_KINDS, attention_kind
from ..layers.block_parts import PARTS
from ..models import ModelConfig
from ..training import TrainConfig
from ..utils.checks import check_declared, is_number, option

# How pages show each built-in kind: its label and colour, in the order tables list them.
KIND_STYLE = {
    "tra": ("TRA", "#d62728"),
    "nope": ("NoPE", "#7f7f7f"),
    "rope": ("RoPE", "#1f77b4"),
    "alibi": ("ALiBi", "#2ca02c"),
    "fox": ("FoX", "#ff7f0e"),
    "cope": ("CoPE", "#9467bd"),
    "t5": ("T5 bias", "#bcbd22"),
    "fire": ("FIRE", "#e7ba52"),
    "kerple": ("KERPLE", "#393b79"),
    "stickbreaking": ("stick-breaking", "#8c6d31"),
    "ssmax": ("SSMax", "#637939"),
    "asentmax": ("ASEntmax", "#17becf"),
    "softpick": ("softpick", "#c49c94"),
    "gated": ("gated attention", "#98df8a"),
    "selective": ("selective attention", "#aec7e8"),
    "fox_pro": ("FoX Pro", "#ffbb78"),
    "path": ("PaTH", "#c5b0d5"),
    "path_fox": ("PaTH-FoX", "#9edae5"),
    "wall": ("Wall attention", "#dbdb8d"),
}
# tab20b's colours but the kinds': a method without a colour of its own (a variant, a user's kind) gets the next
# of them on its page (tables.Legend).
PALETTE = tuple(c for c in (
    "#393b79", "#5254a3", "#6b6ecf", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c", "#8c6d31", "#bd9e39",
    "#e7ba52", "#e7cb94", "#843c39", "#ad494a", "#d6616b", "#e7969c", "#7b4173", "#a55194", "#ce6dbd", "#de9ed6",
) if c not in {color for _, color in KIND_STYLE.values()})  # fmt: skip
# Fields a method may not set: the question and the task decide them, or they are the kind itself.
QUESTION_FIELDS = {"task", "task_args", "model", "lr", "seed", "device", "steps", "fit_accuracy"}
KIND_FIELDS = {"attention", "attention_options", "vocab_size", "tokenizer"}


def label_value(value) -> str:
    """A value as labels write it: 4, 0.5, -inf, true, paper."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _check_fields(name: str, given: dict, config_class, refused: set[str], kind: str) -> None:
    known = {f.name for f in dataclasses.fields(config_class)} - refused
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(f"Method({kind!r}).{name}: {unknown} are not {config_class.__name__} fields a method sets; "
                         f"expected some of {sorted(known)}")  # fmt: skip


def _a_dict(value) -> str | None:
    return None if isinstance(value, dict) else "a dict"


def _rates(value) -> str | None:
    """Distinct finite positive learning rates."""
    try:
        rates = tuple(value)
    except TypeError:
        return "finite positive learning rates"
    if not all(is_number(lr) and math.isfinite(lr) and lr > 0 for lr in rates):
        return "finite positive learning rates"
    return None if len(set(rates)) == len(rates) else "each rate once"


@dataclass(frozen=True, eq=False)
class Method:
    """``kind`` with ``options`` (the kind's), ``model`` (ModelConfig fields) and ``train`` (TrainConfig fields: the
    training aids, such as ``length_spread``) changed from the question's preset. ``lrs``: its own learning-rate
    grid, where it is not the question's. ``label`` and ``color``: how pages show it (derived when empty: the label
    from what it changes, the colour its kind's, or for a variant one of ``PALETTE`` that its page assigns)."""

    kind: str
    options: dict = option(help="the kind's options", check=_a_dict, default_factory=dict)
    model: dict = option(help="ModelConfig fields", check=_a_dict, default_factory=dict)
    train: dict = option(help="TrainConfig fields (the training aids)", check=_a_dict, default_factory=dict)
    label: str = ""
    color: str = ""
    lrs: tuple[float, ...] = option((), "its own learning-rate grid", _rates)

    def __post_init__(self):
        kind = attention_kind(self.kind, "Method.kind")
        check_declared(self, prefix=f"Method({self.kind!r}).")
        # The kind's own check, and its values as the kind stores them (2 -> 2.0 for a float option).
        options = kind.make_options(self.options)
        object.__setattr__(self, "options", {k: getattr(options, k) for k in self.options})
        _check_fields("model", self.model, ModelConfig, KIND_FIELDS, self.kind)
        _check_fields("train", self.train, TrainConfig, QUESTION_FIELDS, self.kind)
        object.__setattr__(self, "lrs", tuple(self.lrs))
        if not self.label:
            object.__setattr__(self, "label", self.derived_label())
        if not self.color and not (self.options or self.model or self.train) and self.kind in KIND_STYLE:
            object.__setattr__(self, "color", KIND_STYLE[self.kind][1])  # a plain kind's; a variant's: its page's

    def derived_label(self) -> str:
        """The kind's label, then what the method changes: ``TRA (local_window=4; length_spread=0.75)``."""
        base = KIND_STYLE.get(self.kind, (self.kind, None))[0]
        parts = [
            ", ".join(f"{k}={label_value(v)}" for k, v in d.items()) for d in (self.options, self.model, self.train)
        ]
        parts = [p for p in parts if p]
        return f"{base} ({'; '.join(parts)})" if parts else base

    @property
    def signature(self) -> str:
        """What the method trains (kind, options, model and training fields) as canonical JSON: equal methods
        train equal runs, whatever their labels."""
        fields = {"kind": self.kind, "options": self.options, "model": self.model, "train": self.train}
        return json.dumps(fields, sort_keys=True)

    def changes(self) -> str:
        """What the method changes, for the page's methods table: ``local_window=4, keep_surrogate=1``."""
        parts = [f"{k}={label_value(v)}" for d in (self.options, self.model, self.train) for k, v in d.items()]
        return ", ".join(parts) or "nothing"

    def with_lrs(self, lrs) -> Method:
        """The same method with its own learning-rate grid."""
        return dataclasses.replace(self, lrs=tuple(lrs))

    def __eq__(self, other) -> bool:
        return isinstance(other, Method) and (self.signature, self.label) == (other.signature, other.label)

    def __hash__(self) -> int:
        return hash((self.signature, self.label))


def method_from_text(text: str) -> Method:
    """A method written on a command line: ``KIND`` or ``KIND:NAME=VALUE,...``, NAME an option of the kind or
    ``model.FIELD`` / ``train.FIELD``, VALUE as JSON (``4``, ``0.75``, ``true``) or else text
    (``tra:local_window=4,keep_surrogate=1``, ``fox:model.block_style=paper``)."""
    kind, _, rest = text.partition(":")
    fields: dict[str, dict] = {"options": {}, "model": {}, "train": {}}
    for item in filter(None, rest.split(",")):
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ValueError(f"method {text!r}: {item!r}; expected NAME=VALUE (KIND:NAME=VALUE,...)")
        where, _, field_name = name.rpartition(".")
        if where not in ("", "model", "train"):
            raise ValueError(f"method {text!r}: {name!r}; expected an option, model.FIELD or train.FIELD")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        fields[where or "options"][field_name] = parsed
    return Method(kind, **fields)


def every_kind() -> list[Method]:
    """One method per registered kind, unchanged, in the pages' order (built-in kinds first)."""
    kinds = [k for k in KIND_STYLE if k in ATTENTION_KINDS] + [k for k in ATTENTION_KINDS if k not in KIND_STYLE]
    return [Method(kind) for kind in kinds]


# The TRA ablations, each one ingredient of TRA removed or moved (docs/model.md): options of the tra kind.
GATE_AT_KEY = Method("tra", options={"gate": "key"}, label="TRA, gate at key", color="#ff9896")
NO_THRESHOLD = Method("tra", options={"threshold": -math.inf}, label="TRA, no threshold", color="#e377c2")
NO_DISTANCE = Method("tra", options={"distance": False}, label="TRA, no distance", color="#8c564b")
ABLATIONS = (GATE_AT_KEY, NO_THRESHOLD, NO_DISTANCE)


def kinds(*names: str) -> tuple[Method, ...]:
    """Each named kind, unchanged."""
    return tuple(Method(name) for name in names)


def randomized(kind: str, positions: int, at_eval: bool = False) -> Method:
    """``kind`` with randomized positions drawn from [0, positions) in training (and in evaluation, as their authors
    evaluate them, with ``at_eval``), labelled alike for every range: questions pick the range for their longest
    test length, and scorecards read them as one row."""
    options = {"random_positions": positions} | ({"random_positions_at_eval": True} if at_eval else {})
    label = f"{KIND_STYLE[kind][0]}, randomized positions" + (", drawn at evaluation too" if at_eval else "")
    return Method(kind, options=options, label=label)


# What this library first ran under each rival's name, until ModelConfig version 8, as values of the options the kind
# gained in version 9, when its name came to mean its authors' configuration (kinds not named computed what they do).
FIRST_RUN_OPTIONS = {
    "stickbreaking": {"head_norm": False},  # the heads as they were: no head norm, no head bias
    "t5": {"shared_table": False},  # a table per layer
    "kerple": {"shared": False, "clamp": "straight_through"},  # a pair per layer, floored straight through
    "ssmax": {"rope": False},  # no positional encoding
    "asentmax": {"nape": False},  # every head NoPE and scaled
}
# Randomized positions, as first run: one draw for every layer (RoPE), random positions drawn once (ALiBi).
FIRST_RUN_RANDOMIZED = {"rope": {"random_per_layer": False}, "alibi": {"random_distances": False}}


def first_run_options(kind: str, options: dict) -> dict:
    """The options that make ``kind`` with ``options`` compute what this library first ran as it (a model config of
    version 8 or earlier meant them: ``tra upgrade`` adds them); empty where the kind computes what it did."""
    if kind in FIRST_RUN_RANDOMIZED:
        return FIRST_RUN_RANDOMIZED[kind] if options.get("random_positions") else {}
    return FIRST_RUN_OPTIONS.get(kind, {})


def as_first_run(method: Method) -> Method:
    """``method`` as this library first ran it, until ModelConfig version 8: since version 9 a rival kind's name
    means its authors' configuration, and its former one is a value of the options it gained
    (``first_run_options``). The pages trained before then show these; the label adds what they set."""
    former = first_run_options(method.kind, method.options)
    if not former:
        return method
    added = ", ".join(f"{k}={label_value(v)}" for k, v in former.items())
    options, label = {**method.options, **former}, f"{method.label} ({added})"
    return dataclasses.replace(method, options=options, label=label, color="")


def with_first_runs(methods) -> tuple[Method, ...]:
    """Each method, preceded by itself as this library first ran it where that differs (``as_first_run``): a page
    that shows both the rivals' former configurations and their authors'."""
    return tuple(m for method in methods for m in dict.fromkeys((as_first_run(method), method)))


def with_block_parts(methods) -> tuple[Method, ...]:
    """Each method, followed by itself with the block parts its kind does not have of its own (FoX Pro's output
    gate, output norm and token shift of keys and values: ModelConfig's fields, layers/block_parts.py), labelled
    ``<label>, with FoX Pro's block``: the block FoX Pro's lead may owe to, given to every method."""

    def with_block(method: Method) -> Method | None:
        own = attention_kind(method.kind).cls.own_block_parts
        parts = {part: True for part in PARTS if part not in own}
        if not parts:
            return None
        label = f"{method.label}, with FoX Pro's block"
        return dataclasses.replace(method, model={**method.model, **parts}, label=label, color="")

    return tuple(m for method in methods for m in (method, with_block(method)) if m is not None)


def with_aid(methods, **train) -> tuple[Method, ...]:
    """Each method, followed by itself with the training aid ``train`` (TrainConfig fields, e.g. ``length_spread``):
    an aid that is not specific to one kind is a column of the comparison, given to every method. A label given to
    the method (``RoPE, randomized positions``) is kept with the aid added, so scorecards read the aided rows of
    questions whose ranges differ as one row."""

    def aided(method: Method) -> Method:
        given = method.label != method.derived_label()
        added = ", ".join(f"{k}={label_value(v)}" for k, v in train.items())
        label = f"{method.label} ({added})" if given else ""
        return dataclasses.replace(method, train={**method.train, **train}, label=label, color="")

    return tuple(m for method in methods for m in (method, aided(method)))


# The methods several questions share: the paper's comparison, the newer rivals (as their authors run them; as this
# library first ran them: ``as_first_run``), TRA's recommended configuration.
PAPER = kinds("tra", "nope", "rope", "alibi", "fox", "cope")
RIVALS = kinds("t5", "fire", "kerple", "stickbreaking", "ssmax", "asentmax")
NEWEST = kinds("softpick", "gated", "selective", "fox_pro", "path", "path_fox", "wall")
RECOMMENDED = Method("tra", options={"local_window": 4, "keep_surrogate": 1.0})
RECOMMENDED_SPREAD = Method("tra", options={"local_window": 4, "keep_surrogate": 1.0}, train={"length_spread": 0.75})


def against_the_rivals(positions: int) -> tuple[Method, ...]:
    """The methods every rivals question compares: the authors' TRA, its recommended configuration (with and
    without the spread of lengths), FoX, ALiBi, RoPE, the newer rivals, and RoPE and ALiBi with randomized
    positions over [0, ``positions``) (at least the question's longest test length)."""
    return (
        Method("tra"), RECOMMENDED, RECOMMENDED_SPREAD, *kinds("fox", "alibi", "rope"), *RIVALS,
        randomized("rope", positions), randomized("alibi", positions),
    )  # fmt: skip


def with_and_without_spread(positions: int) -> tuple[Method, ...]:
    """The methods of a spread question: those of ``against_the_rivals(positions)`` and the newest kinds, each without
    and with the spread of training lengths (``length_spread=0.75``), an aid given to every method, not to TRA alone
    (so TRA's recommended configuration with the spread is its aid's row, not a method of its own)."""
    without = tuple(method for method in against_the_rivals(positions) if not method.train)
    return with_aid((*without, *NEWEST), length_spread=0.75)
