"""majority: the paper's methods, TRA's recommended configuration, the rivals (as first run here, and as their
authors run them) and the newest kinds, 3 seeds; softpick without RoPE beside its control, TRA without the
distance."""

from tra_attn.experiments.methods import NEWEST, NO_DISTANCE, Method, against_the_rivals, with_first_runs
from tra_attn.experiments.spec import Question

spec = Question(
    title="Majority: which methods fit, and which stay exact at 8x the training length?",
    task="majority",
    methods=(
        *with_first_runs(against_the_rivals(512)),
        *NEWEST,
        Method("softpick", options={"rope": False}),
        NO_DISTANCE,
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
