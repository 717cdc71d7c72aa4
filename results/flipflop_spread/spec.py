"""flipflop: the spread of training lengths (length_spread=0.75) given to every method of the flip-flop page as
its name means it (the rivals as their authors run them, the newest kinds), not to TRA alone."""

from tra_attn.experiments.methods import with_and_without_spread
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop: does the spread of training lengths keep every method exact at 8x, or TRA alone?",
    task="flipflop",
    methods=with_and_without_spread(1024),  # randomized positions over [0, 1024): the longest test
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
