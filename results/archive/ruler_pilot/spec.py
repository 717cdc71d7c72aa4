"""A pilot of the small RULER on 2 CPU cores: FoX, TRA's recommended configuration and FoX Pro (the one method that
fits MQAR in every seed, results/mqar), seed 0, one rate, on its seven tasks: which tasks does any fit within the cpu
preset's budget, and what does a run cost? Its runs are the question's own (results/ruler: seed 0 at 3e-3)."""

from tra_attn.experiments.methods import RECOMMENDED, kinds
from tra_attn.experiments.ruler import RULER_TASKS
from tra_attn.experiments.spec import Question

spec = Question(
    title="Small RULER pilot: within 2,000 steps of 32 on CPU, do FoX, TRA's recommended configuration and FoX Pro fit "
    "the needle, variable tracking and word-frequency tasks, and how far do they hold?",
    task=RULER_TASKS,
    methods=(*kinds("fox"), RECOMMENDED, *kinds("fox_pro")),
    seeds=(0,),
    lrs=(3e-3,),
    lrs_source="a pilot: the middle of the question's grid (1e-3, 3e-3, 1e-2), not a selection",
    status="pilot",
)
