"""mqar: the spread of training lengths (length_spread=0.75) given to every method of the mqar page as
its name means it (the rivals as their authors run them, the newest kinds), not to TRA alone."""

from tra_attn.experiments.methods import NEWEST, against_the_rivals, with_aid
from tra_attn.experiments.spec import Question

# The mqar page's methods without the spread (TRA's recommended configuration with it is the aid's own row).
WITHOUT = tuple(method for method in against_the_rivals(512) if not method.train)

spec = Question(
    title="MQAR: does the spread of training lengths make every method fit associative recall, or TRA alone?",
    task="mqar",
    methods=with_aid((*WITHOUT, *NEWEST), length_spread=0.75),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
