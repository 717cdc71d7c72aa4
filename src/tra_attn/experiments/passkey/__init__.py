"""The passkey experiment: every method trained to fit on passkey retrieval at one length, then tested on the
length x depth grid (1x-16x the length, the key at 0%-100% depth)."""

from ...data.synthetic.passkey import Passkey
from ..procedural import procedural_experiment
from .presets import PRESETS
from .report import passkey_section

PASSKEY = procedural_experiment(Passkey.name, PRESETS, passkey_section)
EXPERIMENTS = (PASSKEY,)

__all__ = ["EXPERIMENTS", "PASSKEY"]
