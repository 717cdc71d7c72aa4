"""Why TRA trails FoX on text: TRA's variants beside FoX and ALiBi on byte-level Austen."""

from tra_attn.experiments.methods import NO_THRESHOLD, Method, kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="Text: why does TRA trail FoX, and which variant (threshold, dense heads, warm-up, temperature, block, "
    "gate) closes the gap?",
    task="lm",
    methods=(
        *kinds("tra"),
        NO_THRESHOLD,
        Method("tra", options={"threshold": -1.0}),
        Method("tra", options={"threshold": -0.5}),
        Method("tra", options={"dense_heads": 1}),
        Method("tra", options={"dense_heads": 2}),
        Method("tra", options={"threshold_warmup": 150}),
        Method("tra", options={"learned_temperature": True}),
        Method("tra", model={"block_style": "paper"}),
        Method("tra", options={"gate_bias_init": 3.0}),
        *kinds("fox", "alibi"),
    ),
    seeds=(0, 1),
    lrs=(1e-3, 3e-3, 1e-2),
    sweep_seeds=(0,),
)
