"""Flip-flop, every attention kind, the TRA ablations, TRA's recommended configuration and randomized positions."""

from tra_attn.experiments.methods import ABLATIONS, PAPER, RECOMMENDED, RECOMMENDED_SPREAD, RIVALS, randomized
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop: which attention kinds stay exact at 8x the training length and at other densities?",
    task="flipflop",
    methods=(
        *PAPER[:1],
        *ABLATIONS,
        *PAPER[1:],
        *RIVALS,
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        randomized("rope", 1024),
        randomized("alibi", 1024),
        randomized("rope", 1024, at_eval=True),
        randomized("alibi", 1024, at_eval=True),
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
