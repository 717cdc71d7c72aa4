"""``tra lm eval``: a language model's loss, perplexity and bits per byte at 1x to 16x its training length,
on its run's validation text or on any text (``--text``), with any saved form of the model.

Non-overlapping windows tile the validation text; with a stride, sliding windows score each token with
at least ``length - stride`` tokens of context. Either way every token after the first is scored exactly
once (``data/text/windows.py: eval_windows``). Loss is also reported against the position in the
window (bucketed), so a reader sees where a method breaks when the context outgrows training. The loss
comes from the model's chunked cross-entropy: no (B, S, vocab) fp32 logits at 16x with GPT-2's vocabulary.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...data import make_task, recorded_task_args
from ...data.text.corpus import corpus_files, tokenize_corpus
from ...models import TransformerLM
from ...training.checkpoint import TRAIN_CONFIG_NAME, load_train_state, resolve_checkpoint
from ...training.config import TrainConfig, check_device
from ...training.evaluation import result_rows
from ...training.window_metrics import window_metrics
from ...utils.checks import is_int
from .sample import load_tokenizer

FACTORS = (1, 2, 4, 8, 16)


def _peak_memory_mb(device: str) -> float:
    """Peak memory so far: CUDA memory allocated by tensors, or the process's peak resident set on the CPU."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports kilobytes


@dataclass(frozen=True)
class LMEvaluation:
    """A checked evaluation, ready to run: the model, the tokens it scores and the windows it scores them in.

    Built by ``prepare_lm_eval``, which does every check and loads the model and the text, so a command can
    refuse bad input before it creates any output; ``rows()`` does the work.
    """

    model: TransformerLM
    text: np.ndarray
    token_bytes: np.ndarray
    train_length: int
    factors: list[int]
    stride: int | None
    buckets: int
    device: str
    common: dict
    text_tokens: int = 0  # the whole text's tokens, of which ``text`` is the scored span

    def span_line(self) -> str:
        """What was scored, said with every table: the span and the text's length."""
        start, end = self.common["span"]
        whole = " (the whole text)" if (start, end) == (0, self.text_tokens) else ""
        return f"scored tokens {start}..{end} of the text's {self.text_tokens}{whole}"

    def rows(self) -> list[dict]:
        """One row per metric, factor and window kind ('non_overlapping', and 'sliding' with a stride)."""
        rows = []
        for factor in self.factors:
            length = factor * self.train_length
            for split, stride in [("non_overlapping", None)] + ([("sliding", self.stride)] if self.stride else []):
                metrics = window_metrics(self.model, self.text, length, stride, self.token_bytes, self.buckets)
                metrics["peak_memory_mb"] = _peak_memory_mb(self.device)
                extra = {"stride": stride or length, "factor": factor}
                rows += result_rows(metrics, split=split, length=length, **self.common, **extra)
        return rows


def prepare_lm_eval(
    checkpoint,
    factors=FACTORS,
    stride: int | None = None,
    tokens: int | None = None,
    buckets: int = 8,
    device: str = "cpu",
    text=None,
    offset: int | None = None,
    length: int | None = None,
    budget: int | None = None,
) -> LMEvaluation:
    """The evaluation of ``checkpoint`` (a run, a checkpoint, a ``save_pretrained`` folder or a Hugging Face
    folder of ``tra convert``) on ``text`` (a file, a .gz file or a folder of them, tokenized with the model's
    own tokenizer) or, by default, on the run's validation text; every argument checked, nothing evaluated.

    The scored span is ``tokens`` tokens from ``offset`` (default: the last ``tokens``; all of the text without
    either), the same at every factor; it must lie inside the text (one rule for both: a span reaching past the
    text's end is an error, however it got there). ``budget`` (a comparison's) asks for at most that many of the
    last tokens instead, the whole text if it is shorter. ``length`` is the training length, needed for a model
    saved without its run's training config. Training validates on windows from the start of the validation
    text, so the default span (its end) is disjoint from the tokens that chose learning rates.
    """
    check_device(device)
    factors = sorted(set(factors))
    if not factors or any(not isinstance(f, int) or f <= 0 for f in factors):
        raise ValueError(f"--factors = {factors}; expected positive integers (multiples of the training length)")
    if not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"--buckets = {buckets!r}; expected a positive integer")
    if length is not None and (not is_int(length) or length <= 0):
        raise ValueError(f"--length = {length!r}; expected a positive number of tokens (the training length)")
    if text is not None:
        corpus_files(text)  # a missing file or an empty folder: refused before the model loads
    path = resolve_checkpoint(checkpoint)
    config = TrainConfig.from_dict(load_train_state(path)[0]) if (path / TRAIN_CONFIG_NAME).is_file() else None
    if config is not None and config.task != "lm" and text is None:
        raise ValueError(f"{path}: a model of task {config.task!r}; expected one trained with --task lm")
    if config is None and text is None:
        raise ValueError(
            f"{path} has no training config, so no validation text; expected --text FILE (and --length) or a run "
            "or checkpoint directory of `tra train --task lm`"
        )
    train_length = length or (config.length if config is not None else None)
    if train_length is None:
        raise ValueError(f"{path} has no training config to take the training length from; pass --length")
    if stride is not None and not 0 < stride <= train_length:
        raise ValueError(f"--stride = {stride}; expected an integer in [1, training length = {train_length}]")
    model = TransformerLM.from_pretrained(path, device=device).eval()
    if text is not None:
        tokenizer = load_tokenizer(model, path)
        all_tokens, token_bytes = (
            tokenize_corpus(text, tokenizer, progress=False).tokens,
            tokenizer.token_byte_lengths(),
        )
        source = {"text": str(Path(text).expanduser().absolute())}
    else:
        task = make_task(config.task, **recorded_task_args(config.task, config.task_args, path))
        all_tokens, token_bytes, source = task.tokens("validation"), task.token_bytes(), {}
    if budget is not None:
        if tokens is not None or offset is not None:
            raise ValueError("evaluation: budget is the last tokens, at most; expected it without tokens or offset")
        tokens = min(budget, len(all_tokens))
    start, end = _span(len(all_tokens), tokens, offset)
    longest = max(factors) * train_length
    if end - start < longest + 1:
        raise ValueError(
            f"--factors up to {max(factors)}: windows of {longest} tokens need {longest + 1} tokens; the scored "
            f"text has {end - start} (lower --factors or raise --tokens)"
        )
    common = {
        "task": "lm",
        "method": model.config.attention,
        "seed": config.seed if config is not None else None,
        "config": config.to_dict() if config is not None else {},
        "span": [start, end],
        **source,
    }
    return LMEvaluation(
        model, all_tokens[start:end], token_bytes, train_length, factors, stride, buckets, device, common,
        len(all_tokens),
    )  # fmt: skip


def _span(available: int, tokens: int | None, offset: int | None) -> tuple[int, int]:
    """[start, end) of the scored tokens among ``available``: ``tokens`` from ``offset`` (default: the last)."""
    if tokens is not None and (not is_int(tokens) or tokens < 2):
        raise ValueError(f"--tokens = {tokens!r}; expected at least 2")
    if offset is not None and (not is_int(offset) or not 0 <= offset < available):
        raise ValueError(
            f"--offset = {offset!r}; expected an integer in [0, {available}) (the text has {available} tokens)"
        )
    if offset is None:
        if tokens is not None and tokens > available:
            raise ValueError(
                f"--tokens = {tokens}; expected at most the text's {available} tokens (the scored span must lie "
                "inside the text; without --tokens the whole text is scored)"
            )
        return (available - tokens if tokens is not None else 0), available
    end = available if tokens is None else offset + tokens
    if end > available:
        raise ValueError(
            f"--offset {offset} + --tokens {tokens} = {end}; expected at most the text's {available} tokens"
        )
    return offset, end


def evaluate_lm(checkpoint, **options) -> list[dict]:
    """Rows for a language model at each factor x training length (``prepare_lm_eval`` takes the same keyword
    options and says which model, text and span): non-overlapping windows (split 'non_overlapping') and, with
    ``stride``, sliding windows (split 'sliding')."""
    return prepare_lm_eval(checkpoint, **options).rows()


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
