"""A pilot: at what step cap does the best baseline fit MQAR and majority?"""

from tra_attn.experiments.methods import kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="At what step cap does the best baseline fit MQAR and majority (FoX, RoPE, ALiBi; cap 3000, seed 0)?",
    task=("mqar", "majority"),
    methods=kinds("fox", "rope", "alibi"),
    seeds=(0,),
    lrs=(1e-3, 3e-3),
    steps=3000,
    status="pilot",
)
