"""The ASEntmax authors' synthetic suite on a CPU budget (docs/asentmax_suite.md): TRA, its recommended
configuration, FoX and its successors, stick-breaking, the suite's own authors' ASEntmax, selective attention, ALiBi
and RoPE on the two of their seven tasks that fit within the CPU budget (flip-flop and 2-back), trained on their
training lengths and tested at seq_len 64 to 4096, 3 seeds.

The other five are beyond the budget: in the pilot (results/archive/asentmax_pilot), neither of the two best methods,
ASEntmax and FoX, fitted copy, reverse, sort, MQMTAR or local count within 2,000 steps, so they are not run for every
method (notes.md says what each reached)."""

from tra_attn.experiments.methods import RECOMMENDED, Method, kinds
from tra_attn.experiments.spec import Question

# Every method trains on the protocol's own range of lengths (seq_len 32-64): that range is the protocol's, so TRA's
# recommended configuration has no second row with the spread of lengths here.
METHODS = (
    Method("tra"),
    RECOMMENDED,
    *kinds("fox", "fox_pro", "path_fox", "stickbreaking", "asentmax", "selective", "alibi", "rope"),
)

spec = Question(
    title="The ASEntmax suite within a CPU budget: trained on seq_len 32-64, which methods still solve flip-flop "
    "and 2-back at seq_len 4096?",
    task=("asentmax_flip_flop", "asentmax_nback"),
    methods=METHODS,
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3, 1e-2),
    sweep_seeds=(0,),
    extend_grid=True,  # each method's rate inside its grid, unless it fitted at the edge
)
