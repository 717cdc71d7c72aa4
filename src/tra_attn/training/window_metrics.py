"""A language model's loss, perplexity and bits per byte over a long text cut into windows of any length, with the loss
per position bucket: the evaluation of ``tra lm eval`` and of the retrofit experiment, for any model that returns its
per-token loss (the library's, or a Hugging Face model wrapped to do so)."""

from __future__ import annotations

import numpy as np
import torch

from ..data.text.windows import eval_batch, eval_windows
from ..metrics.accuracy import eval_batch_size
from ..metrics.perplexity import summarize
from ..models import IGNORE_INDEX


@torch.no_grad()
def window_metrics(
    model, tokens: np.ndarray, length: int, stride: int | None, token_bytes, buckets: int, per_batch: int | None = None
) -> dict:
    """Loss, perplexity, bits per byte and loss per position bucket over the windows of
    ``eval_windows(len(tokens), length, stride)``. ``model(inputs, labels=labels)`` gives the per-token loss (B, S), 0
    where a label is IGNORE_INDEX; ``per_batch`` windows go through it at once (default: ``eval_batch_size`` of the
    model's ModelConfig, fewer for kinds that materialise (S, S) scores)."""
    windows = eval_windows(len(tokens), length, stride)
    device = next(model.parameters()).device
    per_batch = per_batch or eval_batch_size(model.config, length)
    edges = [round(b * length / buckets) for b in range(buckets + 1)]
    bucket_of = torch.bucketize(torch.arange(length), torch.tensor(edges[1:-1]), right=True).to(device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    bucket_sum = torch.zeros(buckets, dtype=torch.float64, device=device)
    bucket_count = torch.zeros(buckets, dtype=torch.float64, device=device)
    scored = scored_bytes = 0
    for i in range(0, len(windows), per_batch):
        group = [eval_batch(tokens, w) for w in windows[i : i + per_batch]]
        for size in sorted({g[0].shape[1] for g in group}):  # only the text's last window can be shorter
            inputs, labels, mask = (torch.cat([g[k] for g in group if g[0].shape[1] == size]) for k in range(3))
            inputs, labels, mask = inputs.to(device), labels.to(device), mask.to(device)
            per_token = model(inputs, labels=labels.masked_fill(~mask, IGNORE_INDEX)).double()
            loss_sum += per_token.sum()
            positions = bucket_of[:size].expand_as(mask)[mask]
            bucket_sum.index_add_(0, positions, per_token[mask])
            bucket_count.index_add_(0, positions, torch.ones_like(per_token[mask]))
            scored += int(mask.sum())
            scored_bytes += int(token_bytes[labels[mask].cpu().numpy()].sum())
    metrics = summarize(loss_sum.item(), scored, scored_bytes)
    for b in range(buckets):
        if bucket_count[b] > 0:
            metrics[f"loss@{edges[b]}-{edges[b + 1]}"] = (bucket_sum[b] / bucket_count[b]).item()
    return metrics
