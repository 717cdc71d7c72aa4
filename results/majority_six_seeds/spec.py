"""Majority over six seeds: which training fix makes TRA exact at 8x in every seed?"""

from tra_attn.experiments.methods import RECOMMENDED, RECOMMENDED_SPREAD, Method, kinds
from tra_attn.experiments.spec import Question

LOCAL_SURROGATE = {"local_window": 4, "keep_surrogate": 1.0}

spec = Question(
    title="Majority over six seeds: which training fix (a spread of lengths, a keep penalty, a training threshold "
    "above the evaluation one) makes TRA's recommended configuration exact at 8x in every seed?",
    task="majority",
    methods=(
        *kinds("fox", "tra"),
        RECOMMENDED,
        RECOMMENDED_SPREAD,
        Method("tra", options={**LOCAL_SURROGATE, "keep_penalty": 0.1}),
        Method("tra", options={**LOCAL_SURROGATE, "threshold_shift": 0.25}),
    ),
    seeds=(0, 1, 2, 3, 4, 5),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
