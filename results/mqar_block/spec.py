"""Is FoX Pro's lead on MQAR its forget gate or its block? TRA, its recommended configuration, FoX, RoPE, ALiBi,
NoPE and gated attention, each without and with FoX Pro's block parts (output gate, per-head output norm, token
shift of keys and values), beside FoX Pro itself, on the MQAR preset: 3 seeds, each method at its own rate, every
model matched to TRA's parameter count through its MLP width."""

from tra_attn.experiments.methods import RECOMMENDED, Method, kinds, with_block_parts
from tra_attn.experiments.spec import Question

spec = Question(
    title="MQAR with FoX Pro's block for every method: does the output gate and token shift, not the forget gate, "
    "make FoX Pro the one method that fits?",
    task="mqar",
    methods=(
        *with_block_parts((Method("tra"), RECOMMENDED, *kinds("fox", "rope", "alibi", "nope", "gated"))),
        Method("fox_pro"),
    ),  # fmt: skip
    seeds=(0, 1, 2),
    lrs=(3e-4, 1e-3, 3e-3),
    sweep_seeds=(0,),
    match_parameters=Method("tra"),
)
