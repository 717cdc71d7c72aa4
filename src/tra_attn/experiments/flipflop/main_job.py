"""The main job (``tra flipflop``): the TRA paper's comparison on flip-flop, each method at the preset's rate."""

from __future__ import annotations

from ..methods import ABLATIONS, PAPER
from ..spec import Question

TITLE = "Flip-flop: do TRA, its ablations and the paper's baselines stay exact at 8x the training length?"
METHODS = (*PAPER[:1], *ABLATIONS, *PAPER[1:])  # TRA, its three ablations, NoPE, RoPE, ALiBi, FoX, CoPE


def main_job(preset: str = "cpu", seeds: tuple[int, ...] = (0,)) -> Question:
    """The question ``tra flipflop`` answers: the paper's methods, each at the preset's validated learning rate
    (every kind and more methods, three seeds: ``results/flipflop``)."""
    return Question(TITLE, "flipflop", METHODS, seeds, preset=preset)
