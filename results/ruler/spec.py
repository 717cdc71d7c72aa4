"""A small RULER on synthetic tokens (docs/ruler_suite.md): TRA, its recommended configuration (with and without the
spread of lengths), FoX and its successors, stick-breaking, ASEntmax, selective attention, ALiBi and RoPE, trained at
128 tokens on each task and tested at 1x-16x (the needles at every depth), 3 seeds. Its numbers are not RULER's."""

from tra_attn.experiments.methods import RECOMMENDED, RECOMMENDED_SPREAD, Method, kinds
from tra_attn.experiments.ruler import RULER_TASKS
from tra_attn.experiments.spec import Question

METHODS = (
    Method("tra"),
    RECOMMENDED,
    RECOMMENDED_SPREAD,
    *kinds("fox", "fox_pro", "path_fox", "stickbreaking", "asentmax", "selective", "alibi", "rope"),
)

spec = Question(
    title="RULER on synthetic tokens: trained at 128 tokens, which methods still retrieve, track and aggregate at 16x?",
    task=RULER_TASKS,
    methods=METHODS,
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3, 1e-2),
    sweep_seeds=(0,),
    extend_grid=True,  # each method's rate inside its grid, unless it fitted at the edge
)
