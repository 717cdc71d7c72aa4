"""The passkey experiment (``tra compare passkey``): every method trained to fit on passkey retrieval at one
length, then tested on the length x depth grid (1x-16x the length, the key at 0%-100% depth)."""

from ...data.synthetic.passkey import Passkey
from ..procedural import procedural_experiment
from .presets import PRESETS
from .report import write_report

PASSKEY = procedural_experiment(
    Passkey.name,
    PRESETS,
    write_report,
    summary="passkey retrieval: a digit key hidden in filler, trained at one length, tested on a length x depth grid",
)
EXPERIMENTS = (PASSKEY,)

__all__ = ["EXPERIMENTS", "PASSKEY"]
