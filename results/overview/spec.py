"""The README's results table: every method (the rivals as their authors run them, the newest kinds) against the
authors' TRA on each task, one figure per cell."""

from tra_attn.experiments.methods import NEWEST, RECOMMENDED, RECOMMENDED_SPREAD, RIVALS, kinds, randomized
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
        *NEWEST,
    ),
    columns=(
        Column("flipflop", "longest", "Flip-flop at 8x"),
        Column(("majority", "suite"), "longest", "Majority at 8x", task="majority"),
        Column("passkey", "longest", "Passkey at 16x"),
        Column(("mqar", "suite"), "fitted", "MQAR seeds fitted", task="mqar"),
        Column(("hierarchy", "suite"), "longest", "Hierarchy at 4x", task="hierarchy"),
        Column("text", "first", "Text at 1x"),
        Column("text", "longest", "Text at 16x"),
    ),
)
