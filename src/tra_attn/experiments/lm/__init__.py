"""Language modelling on real text: the experiment's record, its presets, evaluation at 1x-16x the training
length, its page section and sampling."""

from ..experiment import Experiment
from .comparison import SELECTION_METRIC, evaluate_run, validation_rows
from .presets import PRESETS
from .report import lm_section

LM = Experiment(
    task="lm",
    presets=PRESETS,
    evaluate=evaluate_run,
    validation=validation_rows,
    section=lm_section,
    selection_metric=SELECTION_METRIC,
    higher_is_better=False,
    budget_unit="tokens",
)
EXPERIMENTS = (LM,)

__all__ = ["EXPERIMENTS", "LM"]
