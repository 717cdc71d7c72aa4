"""The ASEntmax authors' synthetic suite on a CPU budget (docs/asentmax_suite.md): TRA, its recommended
configuration, FoX and its successors, stick-breaking, the suite's own authors' ASEntmax, selective attention, ALiBi
and RoPE on their seven tasks, trained on their training lengths and tested at seq_len 64 to 4096, 3 seeds."""

from tra_attn.experiments.asentmax import ASENTMAX_TASKS
from tra_attn.experiments.methods import RECOMMENDED, Method, kinds
from tra_attn.experiments.spec import Question

# Every method trains on the protocol's own range of lengths (seq_len 32-64; local count 64-128): that range is the
# protocol's, so TRA's recommended configuration has no second row with the spread of lengths here.
METHODS = (
    Method("tra"),
    RECOMMENDED,
    *kinds("fox", "fox_pro", "path_fox", "stickbreaking", "asentmax", "selective", "alibi", "rope"),
)

spec = Question(
    title="The ASEntmax suite: trained on seq_len 32-64, which methods still solve copy, reverse, sort, MQMTAR, "
    "flip-flop, 2-back and local count at seq_len 4096?",
    task=ASENTMAX_TASKS,
    methods=METHODS,
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3, 1e-2),
    sweep_seeds=(0,),
)
