"""``tra lm eval``: a language model's loss, perplexity and bits per byte at 1x to 16x its training length.

Non-overlapping windows tile the validation text; with a stride, sliding windows score each token with
at least ``length - stride`` tokens of context. Either way every token after the first is scored exactly
once (``data/text/windows.py: eval_windows``). Loss is also reported against the position in the
window (bucketed), so a reader sees where a method breaks when the context outgrows training. The loss
comes from the model's chunked cross-entropy: no (B, S, vocab) fp32 logits at 16x with GPT-2's vocabulary.
"""

from __future__ import annotations

import resource

import numpy as np
import torch

from ...data import make_task, recorded_task_args
from ...data.text.windows import eval_batch, eval_windows
from ...metrics.accuracy import eval_batch_size
from ...metrics.perplexity import summarize
from ...models import IGNORE_INDEX, TransformerLM
from ...training.checkpoint import TRAIN_CONFIG_NAME, load_train_state, resolve_checkpoint
from ...training.config import TrainConfig, check_device
from ...training.evaluation import result_rows

FACTORS = (1, 2, 4, 8, 16)


def _peak_memory_mb(device: str) -> float:
    """Peak memory so far: CUDA memory allocated by tensors, or the process's peak resident set on the CPU."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports kilobytes


@torch.no_grad()
def window_metrics(model, tokens: np.ndarray, length: int, stride: int | None, token_bytes, buckets: int) -> dict:
    """Loss, perplexity, bits per byte and loss per position bucket over the windows of
    ``eval_windows(len(tokens), length, stride)``."""
    windows = eval_windows(len(tokens), length, stride)
    device = next(model.parameters()).device
    per_batch = eval_batch_size(model.config, length)  # fewer windows for kinds that materialise (S, S)
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


def evaluate_lm(
    checkpoint,
    factors=FACTORS,
    stride: int | None = None,
    tokens: int | None = None,
    buckets: int = 8,
    device: str = "cpu",
) -> list[dict]:
    """Rows for a language-model run: each factor x training length, non-overlapping windows (split
    'non_overlapping') and, with ``stride``, sliding windows (split 'sliding'), on the last ``tokens``
    tokens of the validation text (all of it by default). Training validates on windows from the start of
    that text, so with a budget the evaluation tokens are disjoint from those that chose learning rates."""
    check_device(device)
    path = resolve_checkpoint(checkpoint)
    if not (path / TRAIN_CONFIG_NAME).is_file():
        raise ValueError(
            f"{path} has no training config; expected a run or checkpoint directory of `tra train --task lm`"
        )
    config = TrainConfig.from_dict(load_train_state(path)[0])
    if config.task != "lm":
        raise ValueError(f"{path}: a model of task {config.task!r}; expected one trained with --task lm")
    factors = sorted(set(factors))
    if not factors or any(not isinstance(f, int) or f <= 0 for f in factors):
        raise ValueError(f"--factors = {factors}; expected positive integers (multiples of the training length)")
    if stride is not None and not 0 < stride <= config.length:
        raise ValueError(f"--stride = {stride}; expected an integer in [1, training length = {config.length}]")
    if not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"--buckets = {buckets!r}; expected a positive integer")
    task = make_task(config.task, **recorded_task_args(config.task, config.task_args, path))
    text = task.tokens("validation")
    if tokens is not None:
        if tokens < 2:
            raise ValueError(f"--tokens = {tokens}; expected at least 2")
        text = text[-tokens:]
    longest = max(factors) * config.length
    if len(text) < longest + 1:
        raise ValueError(
            f"--factors up to {max(factors)}: windows of {longest} tokens need {longest + 1} validation tokens; "
            f"the text has {len(text)} (lower --factors or raise --tokens)"
        )
    model = TransformerLM.from_pretrained(path, device=device).eval()
    token_bytes = task.token_bytes()
    common = {"task": "lm", "method": model.config.attention, "seed": config.seed, "config": config.to_dict()}
    rows = []
    for factor in factors:
        length = factor * config.length
        for split, split_stride in [("non_overlapping", None)] + ([("sliding", stride)] if stride else []):
            metrics = window_metrics(model, text, length, split_stride, token_bytes, buckets)
            metrics["peak_memory_mb"] = _peak_memory_mb(device)
            extra = {"stride": split_stride or length, "factor": factor}
            rows += result_rows(metrics, split=split, length=length, **common, **extra)
    return rows


def print_table(rows: list[dict]) -> None:
    table: dict[tuple, dict] = {}
    for r in rows:
        table.setdefault((r["split"], r["length"]), {})[r["metric"]] = r["value"]
    print(f"{'split':<11} {'length':>6} {'loss':>8} {'ppl':>9} {'bpb':>7} {'tokens':>9} {'peak MB':>8}")
    for (split, length), m in table.items():
        print(
            f"{split:<11} {length:>6} {m['loss']:>8.4f} {m['perplexity']:>9.3f} {m['bits_per_byte']:>7.4f} "
            f"{m['scored_tokens']:>9} {m['peak_memory_mb']:>8.0f}"
        )
