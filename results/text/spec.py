"""Byte-level Austen at 1x-16x the training length: the paper's methods, TRA's recommended configuration and the
newer rivals, 2 seeds."""

from tra_attn.experiments.methods import FIRST_RIVALS, PAPER, RECOMMENDED, as_first_run, randomized
from tra_attn.experiments.spec import Question

WIDE = (3e-4, 1e-3, 3e-3, 1e-2)  # the first sweep on text, for the paper's methods

spec = Question(
    title="Text: on byte-level Austen, how do TRA, its recommended configuration and the other methods do at 1x-16x "
    "the training length?",
    task="lm",
    methods=(
        *(method.with_lrs(WIDE) for method in PAPER),
        RECOMMENDED,
        *FIRST_RIVALS,
        as_first_run(randomized("rope", 2048)),
        as_first_run(randomized("alibi", 2048)),
    ),
    seeds=(0, 1),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
