"""Declared, checked fields: what every config and argument check asks of a value, in one place.

``is_int`` and ``is_number`` refuse bools (Python's ``True`` is an ``int``). A dataclass field declared with
``option(default, help, check)`` carries its one-line help (flags, docs) and its check, a predicate that returns
None for a valid value or what was expected (``positive_int``: "a positive integer"); ``check_declared`` runs the
checks of an instance's fields and names the first bad one as ``Owner.field = value; expected ...`` (or after another
prefix: a task's ``name: field = value; expected ...``). A class keeps ``__post_init__`` for the rules that span
fields. The attention kinds' options (``layers/options.py``), the training config, the model config, the tasks'
parameters (``data/task.py``), the spec types (``experiments/spec.py``) and the op's contract (``ops/tra/contract.py``)
declare their fields this way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], str | None]  # a value -> None if it is valid, else what was expected


def is_int(value) -> bool:
    """Whether ``value`` is an integer and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """Whether ``value`` is an integer or a float and not a bool (NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def option(default=dataclasses.MISSING, help: str = "", check: Check | None = None, *,
           default_factory=dataclasses.MISSING, flag_type: type | None = None) -> Any:  # fmt: skip
    """A declared field: its default (or ``default_factory``; neither: required), its one-line help and the check
    of its value (None: for a kind's options the default's type decides, elsewhere nothing is checked).
    ``flag_type``: the type of the field's command-line flag where its default does not tell (a default of None)."""
    metadata = {"help": help, "check": check}
    if flag_type is not None:
        metadata["type"] = flag_type
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def check_declared(
    instance, owner: str | None = None, *, prefix: str | None = None, shown: Callable[[Any], str] = repr
) -> None:
    """Run the check of each declared field of the dataclass ``instance``, in declaration order; a ValueError
    ``Owner.field = value; expected ...`` for the first that fails (``owner``: the class's name by default), or
    ``{prefix}field = value; expected ...`` where a ``prefix`` is given (a task's ``"name: "``); ``shown`` writes
    the value (the op's contract adds its type)."""
    where = f"{owner or type(instance).__name__}." if prefix is None else prefix
    for f in dataclasses.fields(instance):
        check = f.metadata.get("check")
        if check is None:  # undeclared, or a field set later (init=False)
            continue
        value = getattr(instance, f.name)
        expected = check(value)
        if expected:
            raise ValueError(f"{where}{f.name} = {shown(value)}; expected {expected}")


def non_negative_int(value) -> str | None:
    return None if is_int(value) and value >= 0 else "a non-negative integer"


def positive_int(value) -> str | None:
    return None if is_int(value) and value > 0 else "a positive integer"


def finite(value) -> str | None:
    return None if is_number(value) and math.isfinite(value) else "a finite number"


def positive(value) -> str | None:
    return None if is_number(value) and math.isfinite(value) and value > 0 else "a finite positive number"


def non_negative(value) -> str | None:
    return None if is_number(value) and math.isfinite(value) and value >= 0 else "a finite number >= 0"


def below_inf(value) -> str | None:
    return None if is_number(value) and value < math.inf else "a number below +inf (-inf allowed, not NaN)"


def boolean(value) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def one_of(*choices: str) -> Check:
    """One of ``choices`` (kept as the check's ``choices``, for the pages that list them)."""

    def check(value) -> str | None:
        return None if value in choices else f"one of {choices}"

    check.choices = choices
    return check


def in_range(
    low: float, high: float, high_allowed: bool = False, what: str = "a number", note: str = "", *,
    low_allowed: bool = True,
) -> Check:  # fmt: skip
    """A number in [low, high) (or [low, high] with ``high_allowed``; (low, ... without ``low_allowed``), called
    ``what`` in the message, ``note`` after it."""
    shown = f"{what} in {'[' if low_allowed else '('}{low:g}, {high:g}{']' if high_allowed else ')'}{note}"

    def check(value) -> str | None:
        above = is_number(value) and (low < value or (low_allowed and value == low))
        ok = above and (value < high or (high_allowed and value == high))
        return None if ok else shown

    return check


def int_in_range(low: int, high: int | None = None) -> Check:
    """An integer (not a bool) >= ``low``, and <= ``high`` when given: "an integer >= low" or "an integer in
    [low, high]"."""
    shown = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"

    def check(value) -> str | None:
        ok = is_int(value) and value >= low and (high is None or value <= high)
        return None if ok else shown

    return check


def optional(check: Check, none: str = "None") -> Check:
    """None, or a value ``check`` accepts: "{none} or {what check expects}"."""

    def either(value) -> str | None:
        expected = None if value is None else check(value)
        return f"{none} or {expected}" if expected else None

    return either
