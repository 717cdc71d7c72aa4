"""hierarchy: the paper's methods, TRA's recommended configuration, the rivals (as first run here, and as their
authors run them) and the newest kinds, 3 seeds."""

from tra_attn.experiments.methods import NEWEST, against_the_rivals, with_first_runs
from tra_attn.experiments.spec import Question

spec = Question(
    title="Hierarchy: which methods fit nested-scope variable recall, and how far do they hold at 2x-4x?",
    task="hierarchy",
    methods=(*with_first_runs(against_the_rivals(512)), *NEWEST),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
