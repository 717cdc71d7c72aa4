"""mqar: the paper's methods, TRA's recommended configuration and the newer rivals, 3 seeds."""

from tra_attn.experiments.methods import against_the_rivals, as_first_run
from tra_attn.experiments.spec import Question

spec = Question(
    title="MQAR: does any method fit multi-query associative recall within 1000 steps?",
    task="mqar",
    methods=tuple(as_first_run(m) for m in against_the_rivals(512)),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
