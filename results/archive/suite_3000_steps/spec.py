"""A pilot: are the suite's fitting failures only a matter of budget (TRA and FoX, cap 3000)?"""

from tra_attn.experiments.methods import kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="The suite with a 3000-step cap: are its fitting failures only a matter of budget (TRA and FoX, seed 0)?",
    task=("hierarchy", "mqar", "selective_copy", "majority"),
    methods=kinds("tra", "fox"),
    seeds=(0,),
    lrs=(1e-3,),
    lrs_source="1e-3, the suite preset's one rate at the time (a pilot: no sweep)",
    steps=3000,
    status="pilot",
)
