"""majority: the spread of training lengths (length_spread=0.75) given to every method of the majority page as
its name means it (the rivals as their authors run them, the newest kinds), not to TRA alone."""

from tra_attn.experiments.methods import with_and_without_spread
from tra_attn.experiments.spec import Question

spec = Question(
    title="Majority: does the spread of training lengths make every method exact at 8x, or TRA alone?",
    task="majority",
    methods=with_and_without_spread(512),  # randomized positions over [0, 512): the longest test
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
