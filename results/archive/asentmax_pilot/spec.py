"""A pilot of the ASEntmax suite on 2 CPU cores: its own authors' method and FoX, seed 0, one rate, on the seven tasks:
which tasks does either fit within the cpu preset's budget, and what does a run cost? Its runs are the suite's
(results/asentmax_suite: seed 0 at 3e-3)."""

from tra_attn.experiments.asentmax import ASENTMAX_TASKS
from tra_attn.experiments.methods import kinds
from tra_attn.experiments.spec import Question

spec = Question(
    title="ASEntmax suite pilot: within 2,000 steps of 32 on CPU, do ASEntmax and FoX fit copy, reverse, sort, "
    "MQMTAR, flip-flop, 2-back and local count, and how far do they hold?",
    task=ASENTMAX_TASKS,
    methods=kinds("asentmax", "fox"),
    seeds=(0,),
    lrs=(3e-3,),
    lrs_source="a pilot: the middle of the suite's grid (1e-3, 3e-3, 1e-2), not a selection",
    status="pilot",
)
