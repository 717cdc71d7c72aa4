"""Byte-level Austen at 1x-16x the training length: the paper's methods, TRA's recommended configuration, the rivals
(as first run here, and as their authors run them) and the newest kinds, 2 seeds."""

from tra_attn.experiments.methods import NEWEST, PAPER, RECOMMENDED, RIVALS, randomized, with_first_runs
from tra_attn.experiments.spec import Question

WIDE = (3e-4, 1e-3, 3e-3, 1e-2)  # the first sweep on text, for the paper's methods

spec = Question(
    title="Text: on byte-level Austen, how do TRA, its recommended configuration and the other methods do at 1x-16x "
    "the training length?",
    task="lm",
    methods=(
        *(method.with_lrs(WIDE) for method in PAPER),
        RECOMMENDED,
        *with_first_runs((*RIVALS, randomized("rope", 2048), randomized("alibi", 2048))),
        *NEWEST,
    ),
    seeds=(0, 1),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
