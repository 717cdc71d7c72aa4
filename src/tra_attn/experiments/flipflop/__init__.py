"""The flip-flop experiment (Liu et al. 2023; the TRA paper's main synthetic task): presets, page, old rows.

Every method trains on FFL(0.8) and is evaluated on IID FFL(0.8), sparse FFL(0.98) and dense FFL(0.1) at
the training length, on IID sequences 2x, 4x and 8x longer and on sparse sequences 8x longer, under the
protocol of every procedural task (``experiments/procedural.py``). ``tra flipflop`` is its command.
"""

from ...data.synthetic.flipflop import FlipFlop
from ..procedural import procedural_experiment
from .presets import PRESETS
from .report import write_report
from .rows import upgrade_rows

FLIPFLOP = procedural_experiment(
    FlipFlop.name,
    PRESETS,
    write_report,
    summary="the main job: TRA vs ablations vs baselines on flip-flop",
    upgrade=upgrade_rows,
    command="flipflop",
)
EXPERIMENTS = (FLIPFLOP,)

__all__ = ["EXPERIMENTS", "FLIPFLOP"]
