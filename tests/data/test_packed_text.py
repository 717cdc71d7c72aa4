"""Packed text training (``tra train --task lm --pack``): the documents of a corpus, the segment ids and loss mask of
packed windows, their way through the training step, and packed training end to end with exact resume."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from tests.cli.test_cli import run
from tra_attn import ModelConfig, TransformerLM
from tra_attn.data import TaskBatch, make_task
from tra_attn.data.text import TokenArray, make_tokenizer, tokenize_corpus, train_window_starts, window_segments
from tra_attn.models import IGNORE_INDEX
from tra_attn.training import TrainConfig
from tra_attn.training.checkpoint import resolve_checkpoint
from tra_attn.training.loop import accumulate_gradients, inputs_and_labels, model_arguments

# Short documents, one of a single character and one with newlines inside (the byte tokenizer's separator
# is a newline too: documents must come from the corpus's record, not from a search for the separator).
DOCUMENTS = [
    "Emma Woodhouse, handsome, clever, and rich",
    "A",
    "Mr. Knightley\nwas a sensible man\nabout seven or eight-and-thirty",
    "Highbury",
    "Harriet Smith was the natural daughter of somebody",
]


@pytest.fixture
def documents(tmp_path, monkeypatch):
    """A corpus folder of DOCUMENTS (files sorted by name, one of them empty) and a validation text."""
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(DOCUMENTS):
        (folder / f"d{i}.txt").write_text(text)
    (folder / "d1_empty.txt").write_text("")  # skipped, with no separator
    (tmp_path / "valid.txt").write_text(" ".join(DOCUMENTS) * 3)
    return {"corpus": str(folder), "validation_text": str(tmp_path / "valid.txt")}


def stream_documents() -> list[int]:
    """The document of each byte of the corpus as built: every document followed by its separator but the last."""
    owners = []
    for k, text in enumerate(DOCUMENTS):
        owners += [k] * (len(text.encode()) + (k < len(DOCUMENTS) - 1))
    return owners


# ---- documents and segment ids, without a model ------------------------------------------------------------


def test_window_segments_at_a_boundary_inside_a_window_at_its_start_and_with_several_documents():
    bounds = [0, 5, 7, 20]  # documents [0, 5), [5, 7), [7, 20), [20, ...)
    got = window_segments(bounds, [0, 5, 3, 18, 21], length=6)  # 7 tokens per window
    expected = [
        [0, 0, 0, 0, 0, 1, 1],  # a boundary inside the window
        [0, 0, 1, 1, 1, 1, 1],  # a window that starts on a document's first token
        [0, 0, 1, 1, 2, 2, 2],  # three documents in one window
        [0, 0, 1, 1, 1, 1, 1],  # into the last document
        [0, 0, 0, 0, 0, 0, 0],  # inside it
    ]
    assert got.dtype == torch.int64 and got.tolist() == expected
    with pytest.raises(ValueError, match=r"document_starts = \[1 5\].*expected 1-d integer offsets starting at 0"):
        window_segments([1, 5], [0], 4)
    with pytest.raises(ValueError, match=r"document_starts\[1:3\] = \[5 5\]; expected increasing"):
        window_segments([0, 5, 5], [0], 4)


@pytest.mark.parametrize("name", ["byte", "gpt2"])
def test_document_starts_follow_each_separator_the_corpus_placed(documents, name):
    tokenizer = make_tokenizer(name)
    corpus = tokenize_corpus(documents["corpus"], tokenizer, progress=False)
    starts = corpus.document_starts
    lengths = [len(tokenizer.encode(text)) for text in DOCUMENTS]
    separator = tokenizer.separator
    assert (
        starts.dtype == np.int64
        and starts.tolist() == np.cumsum([0] + [n + len(separator) for n in lengths[:-1]]).tolist()
    )
    for start in starts[1:]:
        assert corpus.tokens[start - len(separator) : start].tolist() == separator
    if name == "gpt2":  # an unambiguous separator: the documents start exactly after its occurrences
        assert starts[1:].tolist() == (np.flatnonzero(corpus.tokens == separator[0]) + 1).tolist()
    else:  # a newline inside a document starts no document
        assert np.count_nonzero(corpus.tokens == separator[0]) > len(starts) - 1


def test_document_starts_refuse_a_sidecar_that_does_not_add_up(documents):
    corpus = tokenize_corpus(documents["corpus"], "byte", progress=False)
    files = [dict(entry, tokens=entry["tokens"] + 1) for entry in corpus.meta["files"]]
    broken = TokenArray(corpus.tokens, corpus.path, {**corpus.meta, "files": files})
    with pytest.raises(ValueError, match=r"per-file token counts .* do not add up to its \d+ tokens; expected"):
        _ = broken.document_starts


def test_packed_windows_carry_each_tokens_document_and_never_score_across_a_boundary(documents):
    packed = make_task("lm", **documents, pack=True)
    plain = make_task("lm", **documents)
    num, length, seed = 64, 16, 5
    batch = packed.sample(num, length, seed)
    assert torch.equal(batch.tokens, plain.sample(num, length, seed).tokens)  # the same windows
    assert plain.sample(num, length, seed).model_args == {}
    segments = batch.model_args["segment_ids"]
    owners = torch.tensor(stream_documents())
    starts = torch.from_numpy(train_window_starts(len(owners), length, num, seed, step=0))
    absolute = owners[starts[:, None] + torch.arange(length + 1)]
    assert segments.shape == batch.tokens.shape and torch.equal(segments, absolute - absolute[:, :1])
    assert not batch.loss_mask[:, 0].any()
    assert torch.equal(batch.loss_mask[:, 1:], segments[:, 1:] == segments[:, :-1])
    assert (~batch.loss_mask[:, 1:]).any() and (segments[:, -1] >= 2).any()  # boundaries, several in a window
    # The labels of the training step: no next token crosses a document.
    inputs, labels = inputs_and_labels(batch)
    crossing = model_arguments(batch)["segment_ids"] != segments[:, 1:]
    assert (labels[crossing] == IGNORE_INDEX).all() and (labels[~crossing] != IGNORE_INDEX).all()


def test_pack_must_be_a_boolean(documents):
    with pytest.raises(ValueError, match=r"lm: pack = 'yes'; expected true or false"):
        make_task("lm", **documents, pack="yes")


class Recorder(torch.nn.Module):
    """A stand-in model that records what a training step passes it: the plumbing, without attention."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))
        self.calls = []

    def forward(self, input_ids, labels, segment_ids):
        self.calls.append((input_ids, segment_ids))
        return self.weight * (labels != IGNORE_INDEX)


def test_a_training_step_passes_the_batchs_model_arguments_with_each_micro_batch():
    tokens = torch.arange(4 * 7).reshape(4, 7)
    segments = torch.tensor([[0, 0, 1, 1, 1, 2, 2]]).repeat(4, 1) + torch.arange(4)[:, None]
    batch = TaskBatch(tokens, torch.ones_like(tokens, dtype=torch.bool), {"segment_ids": segments})
    config = TrainConfig(task="flipflop", model=ModelConfig(vocab_size=32), length=6, batch_size=4, grad_accum=2)
    model = Recorder()
    inputs, labels = inputs_and_labels(batch)
    accumulate_gradients(model, config, inputs, labels, arguments=model_arguments(batch))
    assert len(model.calls) == 2
    for i, (x, seg) in enumerate(model.calls):
        assert torch.equal(x, tokens[2 * i : 2 * i + 2, :-1]) and torch.equal(seg, segments[2 * i : 2 * i + 2, :-1])


# ---- with the model: these need TransformerLM.forward(..., segment_ids=) -----------------------------------


@pytest.mark.parametrize("attention", ["tra", "fox"])
def test_a_packed_window_scores_each_document_as_if_alone(documents, attention):
    """Through the training step's own inputs: each document of a packed row, run alone, gives the same
    per-token loss, so nothing reaches across a boundary."""
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=256, d_model=16, n_layers=2, n_heads=2, attention=attention)).eval()
    batch = make_task("lm", **documents, pack=True).sample(6, 24, seed=1)
    inputs, labels = inputs_and_labels(batch)
    arguments = model_arguments(batch)
    with torch.no_grad():
        packed = model(inputs, labels=labels, **arguments)
        for row, segments in enumerate(arguments["segment_ids"]):
            for document in segments.unique():
                where = (segments == document).nonzero().flatten()
                piece = slice(int(where[0]), int(where[-1]) + 1)
                alone = model(inputs[row : row + 1, piece], labels=labels[row : row + 1, piece])
                torch.testing.assert_close(packed[row : row + 1, piece], alone, atol=1e-5, rtol=1e-5)


def test_lm_train_pack_records_the_task_argument_and_resumes_exactly(documents, tmp_path, capsys):
    flags = ["--corpus", documents["corpus"], "--validation-text", documents["validation_text"], "--pack"]
    flags += ["--length", "16", "--steps", "6", "--batch-size", "4", "--d-model", "16", "--n-layers", "1"]
    flags += ["--n-heads", "2", "--dropout", "0.1", "--checkpoint-every", "3", "--eval-every", "3"]
    flags += ["--eval-sequences", "2", "--no-progress"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert run(["train", "--task", "lm", "--out", str(straight), *flags], capsys)[0] == 0
    saved = json.loads((straight / "train_config.json").read_text())
    assert saved["task_args"] == {**documents, "pack": True}
    assert run(["train", "--task", "lm", "--out", str(resumed), *flags], capsys)[0] == 0
    shutil.rmtree(resumed / "checkpoints" / "step_0000006")
    assert run(["train", "--task", "lm", "--out", str(resumed), "--resume", *flags], capsys)[0] == 0
    a = TransformerLM.from_pretrained(resolve_checkpoint(straight)).state_dict()
    b = TransformerLM.from_pretrained(resolve_checkpoint(resumed)).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)
    losses = [
        [json.loads(line).get("loss") for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        for run_dir in (straight, resumed)
    ]
    assert [x for x in losses[0] if x is not None] == [x for x in losses[1] if x is not None]
