"""majority: the spread of training lengths (length_spread=0.75) given to every method, not to TRA alone."""

from tra_attn.experiments.methods import RECOMMENDED, Method, kinds, with_aid
from tra_attn.experiments.spec import Question

spec = Question(
    title="Majority: does the spread of training lengths make every method exact at 8x, or TRA alone?",
    task="majority",
    methods=with_aid(
        (Method("tra"), RECOMMENDED, *kinds("fox", "alibi", "rope", "stickbreaking", "kerple", "asentmax", "softpick")),
        length_spread=0.75,
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
