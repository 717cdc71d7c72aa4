"""Hierarchy with a 3000-step cap: is fitting it a matter of budget?"""

from tra_attn.experiments.methods import RECOMMENDED, RECOMMENDED_SPREAD, kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="Hierarchy with a 3000-step cap: do FoX, TRA and TRA's recommended configuration (with and without the "
    "spread of lengths) fit it given the budget?",
    task="hierarchy",
    methods=(*kinds("fox", "tra"), RECOMMENDED, RECOMMENDED_SPREAD),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
    steps=3000,
)
