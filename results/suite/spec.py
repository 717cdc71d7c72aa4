"""The length-generalisation suite: hierarchy, MQAR, selective copy and majority for the paper's methods."""

from tra_attn.experiments.methods import ABLATIONS, PAPER, Method
from tra_attn.experiments.spec import Question

spec = Question(
    title="The suite: on hierarchy, MQAR, selective copy and majority, which kinds fit within 1000 steps, and how do "
    "the fitted ones generalise?",
    task=("hierarchy", "mqar", "selective_copy", "majority"),
    methods=(
        *PAPER[:1],
        *ABLATIONS,
        *PAPER[1:],
        Method("tra", options={"dense_heads": 1}),
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
