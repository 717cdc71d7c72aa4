"""The local-context variants of TRA on majority, MQAR and hierarchy."""

from tra_attn.experiments.methods import RECOMMENDED, Method
from tra_attn.experiments.spec import Question

spec = Question(
    title="Do TRA's local-context variants fit majority, MQAR and hierarchy, and stay exact at 8x?",
    task=("majority", "mqar", "hierarchy"),
    methods=(
        Method("tra", options={"local_window": 4}),
        Method("tra", options={"dense_heads": 2, "dense_window": 16}),
        RECOMMENDED,
        Method("tra", options={"keep_surrogate": 1.0}),
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
