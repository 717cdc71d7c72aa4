"""Flip-flop after a fixed 800 steps: the first sweep of the flip-flop preset's rates (superseded by flipflop)."""

from tra_attn.experiments.methods import ABLATIONS, PAPER
from tra_attn.experiments.spec import Question

spec = Question(
    title="Flip-flop after a fixed 800 steps: which attention kinds stay exact, at the learning rate each does best "
    "at?",
    task="flipflop",
    methods=(*PAPER, *ABLATIONS),
    seeds=(0, 1, 2),
    lrs=(1e-3, 3e-3, 1e-2),
    sweep_seeds=(0,),
    steps=800,
    fit_accuracy=0.0,
    status="archived",
)
