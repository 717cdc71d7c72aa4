"""Every method (the rivals as their authors run them, the newest kinds) against the authors' TRA,
on every bar of every task."""

from tra_attn.experiments.methods import NEWEST, RECOMMENDED, RECOMMENDED_SPREAD, RIVALS, Method, kinds, randomized
from tra_attn.experiments.spec import Bar, Scorecard

spec = Scorecard(
    title="Against the rivals: which method passes text, exactness (flip-flop; majority and passkey at the longest "
    "length) and fitting on every task at once, against the authors' TRA?",
    baseline=Method("tra"),
    candidates=(
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        *kinds("fox", "alibi", "rope"),
        *RIVALS,
        randomized("rope", 1).label,
        randomized("alibi", 1).label,
        randomized("rope", 1, at_eval=True).label,
        randomized("alibi", 1, at_eval=True).label,
        *NEWEST,
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
