"""Flip-flop, every attention kind, the TRA ablations, TRA's recommended configuration and randomized positions."""

from tra_attn.experiments.methods import (
    ABLATIONS,
    FIRST_RIVALS,
    PAPER,
    RECOMMENDED,
    RECOMMENDED_SPREAD,
    as_first_run,
    randomized,
)
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop: which attention kinds stay exact at 8x the training length and at other densities?",
    task="flipflop",
    methods=(
        *PAPER[:1],
        *ABLATIONS,
        *PAPER[1:],
        *FIRST_RIVALS,
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        as_first_run(randomized("rope", 1024)),
        as_first_run(randomized("alibi", 1024)),
        as_first_run(randomized("rope", 1024, at_eval=True)),
        as_first_run(randomized("alibi", 1024, at_eval=True)),
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
