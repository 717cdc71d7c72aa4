"""The spec types' declared fields (``option``): each bad value is refused by name, owner and field, before any
question is read."""

from __future__ import annotations

import pytest

from tra_attn.experiments.methods import Method
from tra_attn.experiments.spec import Bar, Column, Inspection, Overview, Scorecard

CASES = [
    (lambda: Bar("fast", "majority"), r"Bar\.kind = 'fast'; expected one of \('text', 'exact', 'longest', 'fits'\)"),
    (lambda: Bar("text", "text", tolerance=-0.1), r"Bar\.tolerance = -0\.1; expected a finite number >= 0"),
    (lambda: Bar("text", "text", long_tolerance=True), r"Bar\.long_tolerance = True; expected a finite number >= 0"),
    (lambda: Column("majority", "median", "x"), r"Column\.figure = 'median'; expected one of \('longest', 'fitted'"),
    (
        lambda: Scorecard("t?", Method("tra"), (), (), status="draft"),
        r"Scorecard\.status = 'draft'; expected one of \('current', 'pilot', 'archived'\)",
    ),
    (lambda: Overview("t?", ("TRA",), (), status="final"), r"Overview\.status = 'final'; expected one of"),
    (
        lambda: Inspection("t?", "majority", Method("tra"), (0,), ("a",), sequences=0),
        r"Inspection\.sequences = 0; expected a positive integer",
    ),
]


@pytest.mark.parametrize("make,pattern", CASES)
def test_a_bad_field_is_refused_by_owner_and_name(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()
