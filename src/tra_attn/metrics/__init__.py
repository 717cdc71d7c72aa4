"""Metrics computed from a model and a batch: accuracy over scored tokens (perplexity comes with text)."""

from .accuracy import eval_batch_size, sequence_metrics

__all__ = ["eval_batch_size", "sequence_metrics"]
