"""Flip-flop for the local-context variants of TRA , beside TRA and FoX."""

from tra_attn.experiments.methods import RECOMMENDED, Method, kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop: do TRA's local-context variants (a local window, windowed dense heads, the keep surrogate) "
    "stay exact?",
    task="flipflop",
    methods=(
        *kinds("tra", "fox"),
        Method("tra", options={"local_window": 4}),
        Method("tra", options={"dense_heads": 2, "dense_window": 16}),
        RECOMMENDED,
    ),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
