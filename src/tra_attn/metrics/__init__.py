"""Metrics computed from a model and a batch: accuracy over scored tokens; loss, perplexity, bits per byte."""

from .accuracy import eval_batch_size, sequence_metrics
from .perplexity import lm_metrics

__all__ = ["eval_batch_size", "lm_metrics", "sequence_metrics"]
