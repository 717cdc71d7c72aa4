"""Threshold Relative Attention: the op, its call contract (``contract.py``) and its implementations."""

from .chunked import tra_chunked
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .dispatch import IMPLS, threshold_relative_attention
from .naive import keep_and_count, tra_naive

__all__ = [
    "IMPLS",
    "NO_AIDS",
    "NO_DOCUMENTS",
    "Documents",
    "KeepRule",
    "TrainingAids",
    "keep_and_count",
    "threshold_relative_attention",
    "tra_chunked",
    "tra_naive",
]
