"""Does one TRA configuration meet every bar at once, with invariance that training finds every time?"""

from tra_attn.experiments.methods import RECOMMENDED, RECOMMENDED_SPREAD, Method
from tra_attn.experiments.spec import Bar, Scorecard

spec = Scorecard(
    title="Invariance: is TRA's recommended configuration (with the spread of lengths) exact at 8x on majority in "
    "every seed of 6, exact on flip-flop, fitting MQAR and hierarchy as often as FoX, and within 0.5% of FoX on "
    "text over 4 seeds?",
    baseline=Method("fox"),
    candidates=(RECOMMENDED, RECOMMENDED_SPREAD),
    bars=(
        Bar("text", "text_four_seeds", long_tolerance=0.005),
        Bar("exact", "flipflop"),
        Bar("longest", "majority_six_seeds"),
        Bar("fits", "mqar"),
        Bar("fits", "hierarchy_3000_steps"),
    ),
)
