"""Bits per byte of a Hugging Face causal language model over a token array at a window length: the library's own
evaluation (``training/window_metrics.py``: non-overlapping windows, every token after the first
scored once), with the model seen as the library's models are (``TokenLoss``).
"""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F
from torch import nn

from ...hf.attention import converted_kind
from ...metrics.accuracy import SCORES_PER_BATCH, TOKENS_PER_BATCH
from ...models import IGNORE_INDEX
from ...training.window_metrics import window_metrics

MATERIALISING = ("fox", "alibi")  # converted kinds whose op builds (B, H, S, S) biases


class TokenLoss(nn.Module):
    """A Hugging Face causal LM as the library's evaluation calls a model: ``(input_ids, labels=labels)`` -> the
    per-token loss (B, S) in fp32, 0 where a label is IGNORE_INDEX."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        logits = self.model(input_ids=input_ids, use_cache=False).logits.float()
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none")


def windows_per_batch(model, length: int) -> int:
    """Windows per forward: the library's token budget, and its score budget for a kind that materialises scores."""
    batch = TOKENS_PER_BATCH // length
    if converted_kind(model.config) in MATERIALISING:
        batch = min(batch, SCORES_PER_BATCH // (model.config.num_attention_heads * length * length))
    return max(1, batch)


def bits_per_byte(model, tokens: np.ndarray, length: int, token_bytes: np.ndarray) -> float:
    """Bits per byte of ``model`` on ``tokens`` in non-overlapping windows of ``length`` tokens (``token_bytes``: the
    UTF-8 bytes of each id)."""
    per_batch = windows_per_batch(model, length)
    return window_metrics(TokenLoss(model), tokens, length, None, token_bytes, 1, per_batch)["bits_per_byte"]
