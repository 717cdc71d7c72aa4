"""Is there one TRA configuration near FoX on text, exact on flip-flop and at 8x on majority, and fitting
MQAR and hierarchy as often as FoX?"""

from tra_attn.experiments.methods import NO_THRESHOLD, RECOMMENDED, Method, kinds
from tra_attn.experiments.spec import Bar, Scorecard

SUITE = ("suite_local_context", "suite")

spec = Scorecard(
    title="One configuration: is there a TRA configuration within 0.5% of FoX on text, exact on flip-flop and at 8x "
    "on majority, and fitting MQAR and hierarchy as often as FoX?",
    baseline=Method("fox"),
    candidates=(
        *kinds("tra"),
        NO_THRESHOLD,
        Method("tra", options={"local_window": 4}),
        Method("tra", options={"dense_heads": 2, "dense_window": 16}),
        Method("tra", options={"keep_surrogate": 1.0}),
        RECOMMENDED,
    ),
    bars=(
        Bar("text", "text_local_context"),
        Bar("exact", ("flipflop_tra_variants", "flipflop")),
        Bar("longest", SUITE, task="majority"),
        Bar("fits", SUITE, task="mqar"),
        Bar("fits", SUITE, task="hierarchy"),
        Bar("fits", "hierarchy_3000_steps"),
    ),
)
