"""Language modelling as a task of the harness: windows of a tokenized corpus, every next token scored.

``tra train --task lm --task-arg corpus=austen`` trains on the benchmark's train split (the novels ship with
the package) and validates on its validation split; a corpus given as a path needs ``validation_text=PATH``
too. Training windows are a pure function of (seed, step), so resume stays exact. Evaluation (``tra eval``)
scores the same validation tokens at 1x, 2x, 4x, 8x and 16x the training length with non-overlapping
windows: loss, perplexity and bits per byte.

With ``pack=True`` (``tra train --task lm --pack``) training windows are packed documents: each window carries the
document of every token (``segment_ids``, from the corpus's recorded document boundaries), so no token
attends to another document, and the first token of a document is never a target. Validation and
evaluation read the validation text as one stream either way, so their numbers compare across runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ...utils.checks import boolean, option
from ..task import EvalSplit, Task, TaskBatch, register_task
from .corpus import BENCHMARKS, TokenArray, benchmark_files, corpus_files, tokenize_corpus
from .tokenizers import TOKENIZERS, make_tokenizer
from .windows import batch_from_windows, train_window_starts, window_segments

EVAL_FACTORS = (1, 2, 4, 8, 16)


def _corpus(value) -> str | None:
    return None if isinstance(value, str) and value else "a benchmark name or a path"


def _tokenizer_name(value) -> str | None:
    return None if value in TOKENIZERS else f"one of {sorted(TOKENIZERS)}"


def _path_or_none(value) -> str | None:
    return None if value is None or (isinstance(value, str) and value) else "a path"


@functools.lru_cache(maxsize=4)
def _tokenizer(name: str):
    return make_tokenizer(name)


@functools.lru_cache(maxsize=4)
def _token_bytes(name: str) -> np.ndarray:
    return _tokenizer(name).token_byte_lengths()


@functools.lru_cache(maxsize=8)
def _splits(corpus: str, validation: str | None, tokenizer: str, data_dir: str | None) -> dict[str, TokenArray]:
    """The token arrays of the train and validation splits (memory-mapped, tokenized once and cached)."""
    if corpus in BENCHMARKS:
        files = benchmark_files(corpus, data_dir)
        sources = {"train": files["train"], "validation": files["validation"]}
    else:
        sources = {"train": corpus, "validation": validation}
    return {split: tokenize_corpus(source, _tokenizer(tokenizer)) for split, source in sources.items()}


def _windows(
    tokens: np.ndarray, starts: np.ndarray, length: int, document_starts: np.ndarray | None = None
) -> TaskBatch:
    """Windows of ``length + 1`` tokens (``length`` inputs and their next tokens), every label scored; with
    ``document_starts``, packed: each token's document goes to the model as ``segment_ids`` and the first
    token of each document is no label (nothing of its document precedes it)."""
    inputs, labels = batch_from_windows(tokens, starts, length)
    sequences = torch.cat([inputs, labels[:, -1:]], dim=1)
    mask = torch.ones_like(sequences, dtype=torch.bool)
    mask[:, 0] = False  # the first token is never a label
    if document_starts is None:
        return TaskBatch(sequences, mask)
    segments = window_segments(document_starts, starts, length)
    mask[:, 1:] &= segments[:, 1:] == segments[:, :-1]
    return TaskBatch(sequences, mask, {"segment_ids": segments})


@register_task
@dataclass(frozen=True)
class LanguageModelling(Task):
    """Next-token prediction on a text corpus (a benchmark, or your own files)."""

    corpus: str = option("austen", f"a benchmark ({', '.join(BENCHMARKS)}) or a text path", _corpus)
    validation_text: str | None = option(None, "held-out text, when corpus is a path", _path_or_none)
    tokenizer: str = option("byte", f"one of {', '.join(TOKENIZERS)}", _tokenizer_name)
    data_dir: str | None = option(
        None,
        "folder of the benchmark's files (default: austen's files ship with the package; "
        "wikitext103's come through the datasets package)",
        _path_or_none,
    )
    pack: bool = option(False, "training windows of packed documents: no token attends to another", boolean)

    name = "lm"
    has_text_format = False
    scored_per_sequence = False  # loss, perplexity, bits per byte: nothing to train to fit on

    def __post_init__(self):
        super().__post_init__()
        if self.corpus not in BENCHMARKS and self.validation_text is None:
            raise ValueError(
                f"lm: corpus = {self.corpus!r} is a path, and validation_text = None; expected validation_text=PATH "
                f"(held-out text) or a benchmark ({sorted(BENCHMARKS)})"
            )

    @classmethod
    def path_arguments(cls, args: dict) -> list[str]:
        """validation_text and data_dir when given, and corpus unless it names a benchmark."""
        names = [name for name in ("validation_text", "data_dir") if isinstance(args.get(name), str) and args[name]]
        corpus = args.get("corpus")
        return names + (["corpus"] if isinstance(corpus, str) and corpus and corpus not in BENCHMARKS else [])

    @property
    def vocab_size(self) -> int:
        return _tokenizer(self.tokenizer).vocab_size

    def tokenizer_description(self) -> dict:
        return _tokenizer(self.tokenizer).describe()

    def check_data(self) -> None:
        """The corpus files exist (and the packaged ones are intact); ValueError naming what is missing."""
        if self.corpus in BENCHMARKS:
            benchmark_files(self.corpus, self.data_dir)
        else:
            corpus_files(self.corpus)
            corpus_files(self.validation_text)

    def tokens(self, split: str) -> np.ndarray:
        """The memory-mapped token array of ``split`` ('train' or 'validation')."""
        return _splits(self.corpus, self.validation_text, self.tokenizer, self.data_dir)[split].tokens

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` training windows of ``length`` inputs (``length + 1`` tokens), at starts drawn from ``seed``;
        packed (with ``segment_ids``) if ``pack``."""
        train = _splits(self.corpus, self.validation_text, self.tokenizer, self.data_dir)["train"]
        starts = train_window_starts(len(train), length, num, seed, step=0)
        return _windows(train.tokens, starts, length, train.document_starts if self.pack else None)

    def validation(self, num: int, length: int, seed: int) -> TaskBatch:
        """The first ``num`` non-overlapping windows of the validation text (the same every time)."""
        return self._leading_windows(num, length)

    def _leading_windows(self, num: int, length: int) -> TaskBatch:
        tokens = self.tokens("validation")
        fitting = (len(tokens) - 1) // length
        if fitting == 0:
            raise ValueError(
                f"lm: length = {length} needs {length + 1} validation tokens; the validation text has {len(tokens)}"
            )
        return _windows(tokens, np.arange(min(num, fitting)) * length, length)

    def token_bytes(self) -> np.ndarray:
        """(vocab_size,) UTF-8 bytes per id, for bits per byte."""
        return _token_bytes(self.tokenizer)

    def metrics(self, model, batch: TaskBatch) -> dict:
        from ...metrics import lm_metrics

        return lm_metrics(model, batch.tokens, batch.loss_mask, self.token_bytes())

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """The same leading ``sequences * train_length`` validation tokens (as far as the text has them) at
        1x to 16x the training length, in non-overlapping windows; rows report the context length."""
        budget = sequences * train_length
        splits = []
        for factor in EVAL_FACTORS:
            length = factor * train_length
            batch = self._leading_windows(max(1, budget // length), length)
            splits.append(EvalSplit("validation", {"factor": factor}, batch, length=length))
        return splits
