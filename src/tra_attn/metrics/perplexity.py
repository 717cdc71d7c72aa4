"""Language-modelling metrics: mean next-token loss, perplexity and bits per byte over the scored tokens.

The loss comes from the model itself (``model(inputs, labels=...)``), which computes it in chunks, so
evaluating long windows with a large vocabulary never builds the full (B, S, vocab) fp32 logits.
Bits per byte divide the summed loss (in bits) by the UTF-8 bytes of the scored tokens, which makes
byte-level and BPE models comparable.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..models import IGNORE_INDEX, TransformerLM
from .accuracy import eval_batch_size


@torch.no_grad()
def lm_metrics(
    model: TransformerLM, tokens: torch.Tensor, loss_mask: torch.Tensor, token_bytes: np.ndarray | None = None
) -> dict:
    """loss (nats per token), perplexity, bits_per_byte (if ``token_bytes`` gives each id's byte length)
    and the number of scored tokens, for next-token prediction on ``tokens`` (N, L) where ``loss_mask``."""
    n, length = tokens.shape
    batch = eval_batch_size(model.config, length)
    loss_sum, scored, scored_bytes = 0.0, 0, 0
    lengths = None if token_bytes is None else torch.as_tensor(token_bytes)
    for i in range(0, n, batch):
        x, m = tokens[i : i + batch], loss_mask[i : i + batch, 1:]
        labels = x[:, 1:].masked_fill(~m, IGNORE_INDEX)
        loss_sum += model(x[:, :-1], labels=labels).double().sum().item()
        scored += int(m.sum())
        if lengths is not None:
            scored_bytes += int(lengths[x[:, 1:][m].cpu()].sum())
    return summarize(loss_sum, scored, None if lengths is None else scored_bytes)


def summarize(loss_sum: float, scored: int, scored_bytes: int | None) -> dict:
    """loss, perplexity, bits_per_byte (unless ``scored_bytes`` is None) and scored_tokens from sums."""
    loss = loss_sum / scored if scored else math.nan
    metrics = {"loss": loss, "perplexity": math.exp(loss) if scored else math.nan}
    if scored_bytes is not None:
        metrics["bits_per_byte"] = loss_sum / math.log(2) / scored_bytes if scored_bytes else math.nan
    metrics["scored_tokens"] = scored
    return metrics
