"""Whether a local window, a windowed dense head or a gradient to dropped keys closes TRA's text gap."""

from tra_attn.experiments.methods import NO_THRESHOLD, RECOMMENDED, Method, kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="Text: does a local window, a windowed dense head or a gradient to dropped keys close TRA's gap to FoX?",
    task="lm",
    methods=(
        *kinds("tra", "fox"),
        NO_THRESHOLD,
        Method("tra", options={"local_window": 2}),
        Method("tra", options={"local_window": 4}),
        Method("tra", options={"dense_heads": 2, "dense_window": 16}),
        Method("tra", options={"local_window": 2, "dense_heads": 1, "dense_window": 16}),
        Method("tra", options={"keep_surrogate": 1.0}),
        RECOMMENDED,
    ),
    seeds=(0, 1),
    lrs=(1e-3, 3e-3),
    sweep_seeds=(0,),
)
