"""The flip-flop experiment (Liu et al. 2023; the TRA paper's main synthetic task): presets and page section.

Every method trains on FFL(0.8) and is evaluated on IID FFL(0.8), sparse FFL(0.98) and dense FFL(0.1) at
the training length, on IID sequences 2x, 4x and 8x longer and on sparse sequences 8x longer, under the
protocol of every procedural task (``experiments/procedural.py``). ``tra flipflop`` is the main job
(``main_job.py``).
"""

from ...data.synthetic.flipflop import FlipFlop
from ..procedural import procedural_experiment
from .presets import PRESETS
from .report import flipflop_section

FLIPFLOP = procedural_experiment(FlipFlop.name, PRESETS, flipflop_section)
EXPERIMENTS = (FLIPFLOP,)

__all__ = ["EXPERIMENTS", "FLIPFLOP"]
