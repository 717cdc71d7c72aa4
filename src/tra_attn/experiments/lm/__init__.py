"""Language modelling on real text: the comparison's record (``tra compare lm``, ``tra lm compare``), its
presets, evaluation at 1x-16x the training length, page and sampling."""

from ..experiment import Experiment
from .comparison import SELECTION_METRIC, evaluate_run, test_splits, validation_rows
from .presets import DEFAULT_METHODS, PRESETS
from .report import write_report

LM = Experiment(
    name="lm",
    task="lm",
    presets=PRESETS,
    evaluate=evaluate_run,
    validation=validation_rows,
    test_splits=test_splits,
    write_report=write_report,
    selection_metric=SELECTION_METRIC,
    higher_is_better=False,
    summary="train TRA and the baselines on one corpus and budget; bits per byte at 1x-16x; resumable",
    default_methods=DEFAULT_METHODS,
    states_learning_rates=False,
)
EXPERIMENTS = (LM,)

__all__ = ["EXPERIMENTS", "LM"]
