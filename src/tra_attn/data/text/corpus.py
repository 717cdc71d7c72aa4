"""Corpora of real text as cached, memory-mapped token arrays (nanoGPT style), and the named benchmarks.

A corpus is a text file, a ``.gz`` file, or a folder of ``*.txt`` / ``*.txt.gz`` files (sorted, recursive)
whose documents are joined by the tokenizer's separator. It is tokenized once: the ids go to a raw
``.bin`` file (uint16 or uint32) plus a JSON sidecar, under a cache folder, keyed by a hash of the files'
content, their relative names and the tokenizer's ``describe()``; later calls only hash and memory-map.
The sidecar holds a checksum of the ``.bin`` file, verified whenever the cache is opened: a cache changed
in place, truncated or written by an older version (no checksum) is rebuilt from the corpus, never served
(sha256 at about 2 GB/s: 0.13 s for WikiText-103's 240 MB; ``benchmarks/cache_checksum.py``, docs/faults.md).
Nothing here touches the network except ``download_wikitext103`` (through the optional ``datasets`` package),
called only for ``wikitext103`` without a data folder. The ``austen`` benchmark ships with the package
(``corpora/``, sha256 of each file in ``corpora/manifest.json``, checked on every read).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import os
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ...utils.atomic import atomic_write, atomic_write_text, make_directory, remove_stale_temps
from ...utils.os_errors import writing
from .tokenizers import DEFAULT_TOKENIZER, Tokenizer, make_tokenizer, token_dtype

CACHE_ENV = "TRA_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/tra_attn/tokens")
CACHE_FORMAT = 1  # bump when the layout of the .bin/.json pair or the joining of documents changes
CHECKSUM = "sha256"  # of the .bin file, in the sidecar; the fastest full-strength hash of hashlib here
CHECKSUM_BLOCK = 1 << 23  # bytes read per step of the streaming hash
TEXT_SUFFIXES = (".txt", ".txt.gz")

AUSTEN_TRAIN = ("emma", "mansfieldpark", "northangerabbey", "prideprejudice", "sensesensibility")
AUSTEN_VALIDATION = ("persuasion",)
WIKITEXT103_FILES = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}
WIKITEXT103_DATASET = ("Salesforce/wikitext", "wikitext-103-raw-v1")  # datasets.load_dataset's path and name
WIKITEXT103_CACHE = "wikitext103-raw"  # the raw files written from the dataset, inside the token cache folder


@dataclass(frozen=True)
class TokenArray:
    """A tokenized corpus: ``tokens`` (1-d read-only np.memmap), its ``.bin`` file and sidecar metadata.

    ``built`` is True when this call tokenized the corpus, False when it was read from the cache.
    """

    tokens: np.ndarray
    path: Path
    meta: dict = field(repr=False)
    built: bool = False

    def __len__(self) -> int:
        """The number of tokens."""
        return len(self.tokens)

    @functools.cached_property  # computed once per array (a frozen dataclass's __dict__ still takes it)
    def document_starts(self) -> np.ndarray:
        """Offsets (int64, from 0, increasing) of the corpus's documents in ``tokens``, from the sidecar's
        token count of each file: document k runs up to the next start and includes the separator that
        follows it (an end-of-document token, as GPT-2 trains with ``<|endoftext|>``). The sidecar, not a
        search for the separator, because the byte tokenizer's separator, a newline, is also text."""
        counts = [entry.get("tokens") for entry in self.meta.get("files", [])]
        separator = self.meta.get("tokenizer", {}).get("separator")
        sizes = [n for n in counts if n]  # empty files are skipped, with no separator
        ok = all(isinstance(n, int) and n >= 0 for n in counts) and isinstance(separator, list)
        if not ok or not sizes or sum(sizes) + len(separator) * (len(sizes) - 1) != len(self):
            raise ValueError(
                f"token cache {self.path}: its sidecar's per-file token counts {counts[:4]} and separator "
                f"{separator} do not add up to its {len(self)} tokens; expected a sidecar written by this "
                f"version of tra (delete {self.path.with_suffix('.json')} to rebuild it)"
            )
        return np.concatenate([[0], np.cumsum(np.asarray(sizes[:-1], dtype=np.int64) + len(separator))])


def resolve_cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The token cache folder: ``path`` if given, else ``$TRA_CACHE_DIR``, else ``~/.cache/tra_attn/tokens``."""
    if path is None:
        path = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    return Path(path).expanduser()


def corpus_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[Path, list[Path]]:
    """(root, files) of a corpus: one file, a folder (its ``*.txt``/``*.txt.gz``, sorted, recursive) or a list.

    File names relative to ``root`` go into the cache key, so a corpus folder can move without a rebuild.
    """
    if isinstance(source, str | os.PathLike):
        path = Path(source).expanduser()
        if path.is_dir():
            files = sorted(
                (p for p in path.rglob("*") if p.is_file() and p.name.endswith(TEXT_SUFFIXES)),
                key=lambda p: p.relative_to(path).as_posix(),
            )
            if not files:
                raise ValueError(
                    f"corpus folder {path} has no text files; expected *.txt or *.txt.gz files (searched recursively)"
                )
            return path, files
        return path.parent, [_check_file(path)]
    files = [_check_file(Path(p).expanduser()) for p in source]
    if not files:
        raise ValueError("corpus: an empty list of files; expected at least one text file")
    if len({p.resolve() for p in files}) != len(files):
        raise ValueError(f"corpus: files {[str(p) for p in files]} list a file twice; expected distinct files")
    return Path(os.path.commonpath([os.path.abspath(p.parent) for p in files])), files


def _check_file(path: Path) -> Path:
    """``path`` if it is an existing regular file, else a ValueError saying what a corpus path must be."""
    if not path.exists():
        raise ValueError(
            f"corpus path {path} does not exist; expected a text file, a .gz file, or a folder of *.txt / *.txt.gz"
        )
    if not path.is_file():
        raise ValueError(f"corpus path {path} is not a regular file; expected a text file or a .gz file")
    return path


def read_document(path: str | os.PathLike) -> bytes:
    """The content of one corpus file, gunzipped if its name ends in ``.gz``; ValueError naming a bad file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"corpus file {path}: cannot read it ({err.strerror}); expected a readable file") from None
    if path.name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(
                f"corpus file {path}: not a valid gzip file ({err}); expected gzip-compressed text"
            ) from None
    return data


def corpus_key(root: Path, files: Sequence[Path], tokenizer: Tokenizer) -> tuple[str, list[dict]]:
    """sha256 of (cache format, tokenizer description, each file's relative name and content hash).

    Hashes the files as stored (compressed for ``.gz``): cheap enough to run on every call.
    """
    entries = []
    for path in files:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 22), b""):
                    digest.update(block)
        except OSError as err:
            raise ValueError(f"corpus file {path}: cannot read it ({err.strerror}); expected a readable file") from None
        entries.append({"name": _relative_name(root, path), "sha256": digest.hexdigest()})
    identity = {"format": CACHE_FORMAT, "tokenizer": tokenizer.describe(), "files": entries}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest(), entries


def _relative_name(root: Path, path: Path) -> str:
    """``path`` relative to ``root`` in POSIX form: the name that enters the cache key."""
    return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()


def tokenize_corpus(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> TokenArray:
    """The tokens of a corpus (see ``corpus_files``), memory-mapped from the cache; tokenized on the first call.

    Documents are joined by ``tokenizer.separator`` (``<|endoftext|>`` for gpt2, a newline for bytes);
    empty documents are skipped. ``cache_dir`` overrides the cache folder (see ``resolve_cache_dir``); ``progress``
    shows a bar over the files while tokenizing.
    """
    if isinstance(tokenizer, str):
        tokenizer = make_tokenizer(tokenizer)
    root, files = corpus_files(source)
    key, entries = corpus_key(root, files, tokenizer)
    folder = resolve_cache_dir(cache_dir)
    dtype = token_dtype(tokenizer.vocab_size)
    bin_path = folder / f"{tokenizer.name}-{key[:32]}.bin"
    meta_path = bin_path.with_suffix(".json")
    meta, problem = _cached_meta(meta_path, bin_path, key, dtype)
    built = meta is None
    if built:
        make_directory(folder, "token cache folder")
        remove_stale_temps(folder)  # of builds killed half-way (the folder is the library's own)
        if problem:
            print(f"token cache {bin_path}: {problem}; rebuilding it from the corpus {root}", file=sys.stderr)
        meta = _build(bin_path, root, files, entries, key, tokenizer, dtype, progress)
        atomic_write_text(meta_path, json.dumps(meta, indent=1) + "\n")
    tokens = np.memmap(bin_path, dtype=dtype, mode="r", shape=(meta["length"],))
    return TokenArray(tokens=tokens, path=bin_path, meta=meta, built=built)


def file_checksum(path: str | os.PathLike) -> str:
    """``"sha256:<hex>"`` of a file's bytes, streamed in large blocks into one reused buffer."""
    digest = hashlib.new(CHECKSUM)
    buffer = bytearray(CHECKSUM_BLOCK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return f"{CHECKSUM}:{digest.hexdigest()}"


def _cached_meta(meta_path: Path, bin_path: Path, key: str, dtype: np.dtype) -> tuple[dict | None, str]:
    """(the sidecar of a complete, intact cache entry for ``key``, "") or (None, why it must be built):
    "" when there is no entry, else what is wrong with it (inconsistent, no checksum, a wrong checksum)."""
    try:
        meta = json.loads(meta_path.read_text())
        size = bin_path.stat().st_size
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as err:
        return None, f"unreadable sidecar or data ({err})"
    ok = (
        isinstance(meta, dict)
        and meta.get("key") == key
        and meta.get("dtype") == dtype.name
        and isinstance(meta.get("length"), int)
        and meta["length"] > 0
        and size == meta["length"] * dtype.itemsize
    )
    if not ok:
        return None, f"its size or sidecar {meta_path.name} does not match the corpus"
    if "checksum" not in meta:
        return None, "no checksum (written by an older version of tra)"
    try:
        actual = file_checksum(bin_path)
    except OSError as err:
        return None, f"cannot read it ({err.strerror})"
    if actual != meta["checksum"]:
        return None, f"its data do not match the checksum in {meta_path.name} (changed or corrupted on disk)"
    return meta, ""


def _build(bin_path, root, files, entries, key, tokenizer, dtype, progress) -> dict:
    """Tokenize ``files`` into ``bin_path`` (atomically) and return the sidecar metadata."""
    separator = np.asarray(tokenizer.separator, dtype=dtype)
    counts = []

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as out:
            bar = tqdm(files, desc=f"tokenizing ({tokenizer.name})", unit="file", disable=not progress, leave=False)
            for path in bar:
                try:
                    ids = tokenizer.encode_array(read_document(path))
                except ValueError as err:
                    message = str(err)
                    raise ValueError(message if str(path) in message else f"corpus file {path}: {message}") from None
                # Through the Python file object, not ndarray.tofile: on a full disk numpy raises "N requested and
                # M written" with no errno, Python the OS error itself (ENOSPC, EDQUOT, EFBIG).
                if len(ids) and sum(counts):
                    out.write(separator.data)
                out.write(np.ascontiguousarray(ids, dtype=dtype).data)
                counts.append(len(ids))
        if not sum(counts):
            raise ValueError(
                f"corpus {root} is empty: its {len(files)} file(s) {[str(p) for p in files[:3]]}"
                f"{' ...' if len(files) > 3 else ''} hold no text; expected at least one token"
            )
        checksum.append(file_checksum(tmp))

    checksum: list[str] = []
    with writing("token cache", bin_path):  # names what and where the OS error was met
        atomic_write(bin_path, write)
    documents = sum(1 for n in counts if n)
    length = sum(counts) + len(separator) * max(documents - 1, 0)
    return {
        "format": CACHE_FORMAT,
        "key": key,
        "dtype": dtype.name,
        "length": length,
        "documents": documents,
        "checksum": checksum[0],
        "tokenizer": tokenizer.describe(),
        "root": os.path.abspath(root),
        "sources": [os.path.abspath(p) for p in files],
        "files": [dict(entry, tokens=n) for entry, n in zip(entries, counts)],
    }


# ---- named benchmarks ----------------------------------------------------------------------------


PACKAGED_CORPORA = Path(__file__).resolve().parent / "corpora"  # shipped in the wheel (package data)
MANIFEST_NAME = "manifest.json"  # each packaged file's sha256, size, title and year; source and licence


def packaged_corpus_file(name: str) -> Path:
    """The path of a corpus file shipped with the package, after checking its sha256 against the manifest.

    A ValueError names the file and, for a changed one, the expected and actual hashes (a truncated copy,
    a Git LFS pointer or an edited file is refused, never tokenized into a cached benchmark).
    """
    manifest_path = PACKAGED_CORPORA / MANIFEST_NAME
    try:
        files = json.loads(manifest_path.read_text(encoding="utf-8"))["files"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"packaged corpora: cannot read {manifest_path} ({err}); expected the manifest installed with tra_attn "
            "(reinstall the package, or pass --data-dir)"
        ) from None
    if name not in files:
        raise ValueError(f"packaged corpora: {name!r} is not in {manifest_path}; expected one of {sorted(files)}")
    path = PACKAGED_CORPORA / name
    try:
        actual = file_checksum(path).removeprefix(f"{CHECKSUM}:")
    except OSError as err:
        raise ValueError(
            f"packaged corpus file {path}: cannot read it ({err.strerror}); expected the file installed with "
            "tra_attn (reinstall the package, or pass --data-dir)"
        ) from None
    expected = files[name]["sha256"]
    if actual != expected:
        raise ValueError(
            f"packaged corpus file {path} has sha256 {actual}; expected {expected} (the file is damaged or was "
            "changed: restore it from the repository, or pass --data-dir)"
        )
    return path


def austen_files(data_dir: str | os.PathLike | None = None) -> dict[str, list[Path]]:
    """The ``austen`` benchmark: train = five Austen novels, validation = *Persuasion* (a whole held-out book).

    By default the novels shipped with the package (``corpora/``, each checked against its recorded
    sha256); ``data_dir`` reads ``austen_<novel>.txt.gz`` (or ``.txt``) from a folder of your own instead.
    """
    if data_dir is None:
        return {
            "train": [packaged_corpus_file(f"austen_{n}.txt.gz") for n in AUSTEN_TRAIN],
            "validation": [packaged_corpus_file(f"austen_{n}.txt.gz") for n in AUSTEN_VALIDATION],
        }
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise ValueError(f"austen: --data-dir {data_dir} is not a folder; expected the folder of austen_*.txt.gz")

    def novel(name: str) -> Path:
        for suffix in (".txt.gz", ".txt"):
            path = data_dir / f"austen_{name}{suffix}"
            if path.is_file():
                return path
        raise ValueError(f"austen: {data_dir} has no austen_{name}.txt.gz (or .txt); expected all six novels there")

    return {"train": [novel(n) for n in AUSTEN_TRAIN], "validation": [novel(n) for n in AUSTEN_VALIDATION]}


def wikitext103_files(data_dir: str | os.PathLike | None = None) -> dict[str, list[Path]]:
    """The ``wikitext103`` benchmark: ``wiki.{train,valid,test}.raw`` from ``data_dir``.

    Without ``data_dir``, the raw files are written once from Hugging Face's ``wikitext-103-raw-v1`` (the
    optional ``datasets`` package: its cache, or a download where the network allows) into
    ``wikitext103-raw/`` of the token cache folder, and read from there afterwards.
    """
    if data_dir is None:
        folder = resolve_cache_dir() / WIKITEXT103_CACHE
        if not all((folder / name).is_file() for name in WIKITEXT103_FILES.values()):
            download_wikitext103(folder)
        data_dir = folder
    data_dir = Path(data_dir).expanduser()
    splits = {}
    for split, name in WIKITEXT103_FILES.items():
        path = data_dir / name
        if not path.is_file():
            raise ValueError(
                f"wikitext103: {path} does not exist; expected {sorted(WIKITEXT103_FILES.values())} in --data-dir"
            )
        splits[split] = [path]
    return splits


BENCHMARKS = {"austen": austen_files, "wikitext103": wikitext103_files}


def benchmark_files(name: str, data_dir: str | os.PathLike | None = None) -> dict[str, list[Path]]:
    """The files of each split of the benchmark ``name``; ValueError naming what is wrong."""
    if name not in BENCHMARKS:
        raise ValueError(f"benchmark = {name!r}; expected one of {sorted(BENCHMARKS)}")
    return BENCHMARKS[name](data_dir)


def load_benchmark(
    name: str,
    tokenizer: str | Tokenizer = DEFAULT_TOKENIZER,
    *,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> dict[str, TokenArray]:
    """The token arrays of every split of the benchmark ``name`` (e.g. ``{'train': ..., 'validation': ...}``)."""
    if isinstance(tokenizer, str):
        tokenizer = make_tokenizer(tokenizer)
    return {
        split: tokenize_corpus(files, tokenizer, cache_dir=cache_dir, progress=progress)
        for split, files in benchmark_files(name, data_dir).items()
    }


def download_wikitext103(data_dir: str | os.PathLike, source: tuple[str, str] = WIKITEXT103_DATASET) -> Path:
    """Write ``wiki.{train,valid,test}.raw`` into ``data_dir`` from the Hugging Face dataset ``source`` (a
    ``datasets.DatasetDict`` with the three splits and a ``text`` column: ``wikitext-103-raw-v1``).

    Optional: needs the ``datasets`` package, which reads its own cache or downloads where the network
    allows. Rows are the raw files' lines; blank rows are written back as the raw files' blank lines (a
    single space). Each file is written atomically, so an interrupted call leaves whole files only.
    """
    if importlib.util.find_spec("datasets") is None:
        raise ValueError(
            "wikitext103: no --data-dir, and the Python package 'datasets' that reads Hugging Face's copy is not "
            "installed; expected --data-dir (the folder holding wiki.train.raw, wiki.valid.raw, wiki.test.raw) "
            "or `pip install 'threshold-relative-attention[datasets]'`"
        )
    import datasets

    try:
        dataset = datasets.load_dataset(*source)
    except Exception as err:  # the hub unreachable and no cache, a damaged cache: datasets' own error types
        raise ValueError(
            f"wikitext103: cannot load the dataset {'/'.join(source)} from the datasets cache or the hub ({err}); "
            "expected network access once, or --data-dir (the folder holding wiki.train.raw, wiki.valid.raw, "
            "wiki.test.raw)"
        ) from None
    missing = [split for split in WIKITEXT103_FILES if split not in dataset]
    if missing:
        raise ValueError(
            f"wikitext103: the dataset {'/'.join(source)} lacks the splits {missing}; "
            f"expected {list(WIKITEXT103_FILES)}"
        )
    folder = make_directory(Path(data_dir).expanduser(), "wikitext103 folder")
    for split, file_name in WIKITEXT103_FILES.items():
        rows = dataset[split]["text"]

        def write(tmp: Path, rows=rows) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                for row in rows:
                    f.write(row if row else " \n")

        with writing("wikitext103 raw file", folder / file_name):
            atomic_write(folder / file_name, write)
    return folder
