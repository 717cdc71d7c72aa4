"""The README's results table: every method against the authors' TRA on each task, one figure per cell."""

from tra_attn.experiments.methods import RECOMMENDED, RECOMMENDED_SPREAD, RIVALS, kinds, randomized
from tra_attn.experiments.spec import Column, Overview

spec = Overview(
    title="Overview: each method on each task, one figure per cell",
    rows=(
        *kinds("tra"),
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        *kinds("fox", "alibi", "rope", "nope", "cope"),
        *RIVALS,
        randomized("rope", 1).label,
        randomized("alibi", 1).label,
    ),
    columns=(
        Column("flipflop", "longest", "Flip-flop, 8x"),
        Column("majority", "longest", "Majority, 8x"),
        Column("passkey", "longest", "Passkey, 16x"),
        Column("mqar", "fitted", "MQAR, fitted"),
        Column("hierarchy", "longest", "Hierarchy, 4x"),
        Column("text", "first", "Text, 1x"),
        Column("text", "longest", "Text, 16x"),
    ),
)
