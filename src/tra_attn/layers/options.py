"""The options of an attention kind: a small frozen dataclass that the kind declares and checks (with ``option``
and the predicates of ``utils/checks.py``, which every other config declares with too).

Each kind owns its options (TRA's threshold and windows, RoPE's base, CoPE's table size): the model
configuration holds the kind's name and an instance of its options class, never a field of one kind. A new
option is one field in its kind's class (with its help and its check); flags, the Hugging Face config and
the method table read it from there.

    @dataclass(frozen=True)
    class MyOptions(KindOptions):
        prefix = "mine"                       # its flags: --mine-width
        width: int = option(4, "keys per group", positive_int)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..utils.checks import (  # noqa: F401  (the kinds declare their options with these)
    Check,
    below_inf,
    boolean,
    finite,
    is_int,
    non_negative,
    non_negative_int,
    one_of,
    option,
    positive,
    positive_int,
)


def _default_check(default) -> Check:
    if isinstance(default, bool):
        return boolean
    if isinstance(default, int):
        return lambda value: None if is_int(value) else "an integer"
    if isinstance(default, float):
        return finite
    return lambda value: None if isinstance(value, type(default)) else f"a {type(default).__name__}"


@dataclass(frozen=True)
class KindOptions:
    """Base of every kind's options. Fields are declared with ``option``; each value is checked when the
    options are built (an integer given for a float option becomes a float, so saved configs compare equal),
    then ``check`` runs the checks that span fields. ``prefix`` names the flags (``--{prefix}-{option}``)
    and the qualified names pages show (``{prefix}_{option}``)."""

    prefix: ClassVar[str] = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = (f.metadata.get("check") or _default_check(f.default))(value)
            if expected:
                raise ValueError(f"{self.describe(f.name)} = {value!r}; expected {expected}")
            if isinstance(f.default, float) and is_int(value):
                object.__setattr__(self, f.name, float(value))
        self.check()

    def check(self) -> None:
        """Checks that span several options (a ValueError naming the option); nothing by default."""

    @classmethod
    def describe(cls, name: str) -> str:
        """How errors name an option: ``TRAOptions.local_window``."""
        return f"{cls.__name__}.{name}"

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def qualified(cls, name: str) -> str:
        """The option's name outside its kind (pages, legacy configs): ``tra_local_window``."""
        return f"{cls.prefix}_{name}" if cls.prefix else name

    @classmethod
    def from_dict(cls, data, owner: str) -> KindOptions:
        """The options of ``owner`` (``attention = 'tra'``, or a layer class) from a dict (unset options take
        their defaults); an unknown name is a ValueError listing the options ``owner`` has."""
        if isinstance(data, cls):
            return data
        if isinstance(data, KindOptions):
            data = data.to_dict()
        if not isinstance(data, dict):
            raise ValueError(
                f"attention_options = {data!r}; expected a dict of the options of {owner} (or {cls.__name__})"
            )
        unknown = sorted(set(data) - set(cls.names()))
        if unknown:
            known = ", ".join(cls.names()) or "none"
            raise ValueError(f"{unknown} are not options of {owner}; its options: {known}")
        return cls(**data)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def changed(self) -> dict:
        """The options that differ from their defaults, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}


@dataclass(frozen=True)
class NoOptions(KindOptions):
    """The options of a kind that has none (NoPE, ALiBi)."""


def random_positions_option() -> Any:
    """The option ``random_positions`` shared by the position-based kinds (their layers return it from
    ``position_range``): randomized positional encodings in training (ops/positions.py)."""
    return option(
        0,
        "in training, positions are a sorted random subset of [0, N), drawn in every forward (randomized "
        "positional encodings, Ruoss et al. 2023; RoPE draws per layer, ALiBi draws distances of [1, N) per "
        "layer: their options random_per_layer, random_distances); evaluation uses 0, 1, ... (unless "
        "random_positions_at_eval); 0: off",
        non_negative_int,
    )


def random_positions_at_eval_option() -> Any:
    """The option ``random_positions_at_eval`` of the position-based kinds: evaluation forwards draw positions too."""
    return option(
        False,
        "with random_positions: evaluation forwards draw their positions as training does (the authors' protocol), "
        "a draw per sequence seeded by its tokens (deterministic, each sequence as if alone); no KV-cache decoding; "
        "false: evaluation uses 0, 1, ...",
    )


@dataclass(frozen=True)
class RandomPositionsOptions(KindOptions):
    """Base of the options of a position-based kind, which declares ``random_positions`` and
    ``random_positions_at_eval`` (after its own options, before those that say how it draws: ALiBi's
    ``random_distances``, RoPE's ``random_per_layer``); checks that the second has a range to draw from."""

    def check(self) -> None:
        if self.random_positions_at_eval and not self.random_positions:
            raise ValueError(
                f"{self.describe('random_positions_at_eval')} = True with random_positions = 0; expected "
                "random_positions > 0, the range evaluation positions are drawn from"
            )
