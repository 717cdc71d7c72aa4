"""The main job (``tra flipflop``): every attention kind and TRA ablation on flip-flop, at the preset's rates."""

from __future__ import annotations

from ..methods import kinds_and_ablations
from ..spec import Question

TITLE = "Flip-flop: which attention kinds stay exact at 8x the training length and at other densities?"


def main_job(preset: str = "cpu", seeds: tuple[int, ...] = (0,)) -> Question:
    """The question ``tra flipflop`` answers: each method at the preset's validated learning rate."""
    return Question(TITLE, "flipflop", tuple(kinds_and_ablations()), seeds, preset=preset)
