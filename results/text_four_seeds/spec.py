"""TRA's recommended configuration against FoX on text over four seeds."""

from tra_attn.experiments.methods import RECOMMENDED, kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="Text over four seeds: how far is TRA's recommended configuration from FoX?",
    task="lm",
    methods=(*kinds("fox"), RECOMMENDED),
    seeds=(0, 1, 2, 3),
    lrs=(3e-3,),
    lrs_source="3e-3 for both, the rate the sweep of results/text_local_context selects for each on validation data",
)
