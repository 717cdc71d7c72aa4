"""Threshold Relative Attention: the op and its implementations."""

from .chunked import tra_chunked
from .dispatch import IMPLS, threshold_relative_attention
from .naive import keep_and_count, tra_naive

__all__ = ["IMPLS", "keep_and_count", "threshold_relative_attention", "tra_chunked", "tra_naive"]
