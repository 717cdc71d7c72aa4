"""hierarchy: the paper's methods, TRA's recommended configuration and the newer rivals, 3 seeds."""

from tra_attn.experiments.methods import against_the_rivals, as_first_run
from tra_attn.experiments.spec import Question

spec = Question(
    title="Hierarchy: which methods fit nested-scope variable recall, and how far do they hold at 2x-4x?",
    task="hierarchy",
    methods=tuple(as_first_run(m) for m in against_the_rivals(512)),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
