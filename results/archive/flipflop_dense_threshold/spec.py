"""A pilot for text_tra_variants: do one dense head and threshold -1 keep flip-flop exact?"""

from tra_attn.experiments.methods import Method
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop after 800 steps: do one dense head and threshold -1 keep TRA exact?",
    task="flipflop",
    methods=(Method("tra", options={"dense_heads": 1}), Method("tra", options={"threshold": -1.0})),
    seeds=(0, 1),
    lrs=(1e-3,),
    lrs_source="1e-3, the flip-flop preset's rate for TRA at the time (a pilot: no sweep)",
    steps=800,
    fit_accuracy=0.0,
    status="pilot",
)
