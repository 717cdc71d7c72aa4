"""Issue 31: every method against the authors' TRA, on every bar of every task."""

from tra_attn.experiments.methods import (
    FIRST_RIVALS,
    RECOMMENDED,
    RECOMMENDED_SPREAD,
    Method,
    as_first_run,
    kinds,
    randomized,
)
from tra_attn.experiments.spec import Bar, Scorecard

spec = Scorecard(
    title="Against the rivals: which method passes text, exactness (flip-flop; majority and passkey at the longest "
    "length) and fitting on every task at once, against the authors' TRA?",
    baseline=Method("tra"),
    candidates=(
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        *kinds("fox", "alibi", "rope"),
        *FIRST_RIVALS,
        as_first_run(randomized("rope", 1)).label,
        as_first_run(randomized("alibi", 1)).label,
        as_first_run(randomized("rope", 1, at_eval=True)).label,
        as_first_run(randomized("alibi", 1, at_eval=True)).label,
    ),
    bars=(
        Bar("text", "text"),
        Bar("exact", "flipflop"),
        Bar("longest", "majority"),
        Bar("longest", "passkey"),
        Bar("fits", "flipflop"),
        Bar("fits", "majority"),
        Bar("fits", "mqar"),
        Bar("fits", "hierarchy"),
        Bar("fits", "passkey"),
    ),
)
