"""Flip-flop, every attention kind, the TRA ablations, TRA's recommended configuration, the rivals (as first run here,
and as their authors run them), randomized positions and the newest kinds."""

from tra_attn.experiments.methods import (
    ABLATIONS,
    NEWEST,
    PAPER,
    RECOMMENDED,
    RECOMMENDED_SPREAD,
    RIVALS,
    randomized,
    with_first_runs,
)
from tra_attn.experiments.spec import Question

RANDOMIZED = tuple(randomized(kind, 1024, at_eval) for at_eval in (False, True) for kind in ("rope", "alibi"))

spec = Question(
    title="Flip-flop: which attention kinds stay exact at 8x the training length and at other densities?",
    task="flipflop",
    methods=(
        *PAPER[:1],
        *ABLATIONS,
        *PAPER[1:],
        *with_first_runs((*RIVALS, *RANDOMIZED)),
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        *NEWEST,
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
