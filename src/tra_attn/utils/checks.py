"""What every check of a config or an argument asks of a value, in one place: an integer that is not a bool, a
number that is not a bool (Python's ``True`` is an ``int``, so ``isinstance(True, int)`` alone would take it).

``layers/options.py`` builds its option checks (``positive_int``, ``finite``, ...) on these.
"""

from __future__ import annotations


def is_int(value) -> bool:
    """Whether ``value`` is an integer and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """Whether ``value`` is an integer or a float and not a bool (NaN and infinities included)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
