"""Training on packed documents of varied length (TrainConfig.length_spread): valid documents of the task,
a pure function of the seed, each document scored as it is alone, and resumable runs."""

from __future__ import annotations

import shutil

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.data import make_task
from tra_attn.models import IGNORE_INDEX
from tra_attn.ops.varlen import PADDING
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import list_checkpoints, resolve_checkpoint
from tra_attn.training.length_spread import spread_batch
from tra_attn.upgrade.configs import upgrade_train_config
from tra_attn.utils.dataclass_io import OldVersion


@pytest.mark.parametrize("task,args,length", [("majority", {"num_marked": 3}, 48), ("flipflop", {}, 40)])
def test_rows_pack_whole_valid_documents_of_the_spread_and_repeat_per_seed(task, args, length):
    task = make_task(task, **args)
    batch = spread_batch(task, 16, length, seed=5, spread=0.6)
    again = spread_batch(task, 16, length, seed=5, spread=0.6)
    assert torch.equal(batch.tokens, again.tokens) and torch.equal(
        batch.model_args["segment_ids"], again.model_args["segment_ids"]
    )
    assert not torch.equal(batch.tokens, spread_batch(task, 16, length, seed=6, spread=0.6).tokens)
    seen = set()
    for tokens, mask, segments in zip(batch.tokens, batch.loss_mask, batch.model_args["segment_ids"]):
        for doc in segments.unique().tolist():
            where = (segments == doc).nonzero().flatten()
            if doc == PADDING:
                assert where.min() > 0 and where.numel() < 0.4 * length + 2 and not mask[where].any()
                continue
            assert where.numel() >= 0.4 * length and (where.diff() == 1).all()  # contiguous, in the spread
            seen.add(where.numel())
            piece = tokens[where]
            encoded = task.encode_text(task.decode_text(piece))  # a valid sequence of the task
            assert torch.equal(encoded, piece) and torch.equal(task.loss_mask(piece[None])[0], mask[where])
    assert len(seen) > 3  # lengths vary


def test_a_packed_row_scores_each_document_as_it_is_alone():
    torch.manual_seed(0)
    task = make_task("majority", num_marked=3)
    batch = spread_batch(task, 4, 48, seed=2, spread=0.5)
    model = TransformerLM(
        ModelConfig(vocab_size=5, d_model=16, n_heads=2, attention_options={"local_window": 2})
    ).double()
    labels = batch.tokens[:, 1:].masked_fill(~batch.loss_mask[:, 1:], IGNORE_INDEX)
    packed = model(batch.tokens[:, :-1], labels=labels, segment_ids=batch.model_args["segment_ids"][:, :-1])
    for r in range(4):
        segments = batch.model_args["segment_ids"][r]
        for doc in segments.unique().tolist():
            if doc == PADDING:
                continue
            where = (segments == doc).nonzero().flatten()
            alone = model(batch.tokens[r, where][None, :-1], labels=labels[r, where[:-1]][None])
            torch.testing.assert_close(packed[r, where[:-1]], alone[0], atol=1e-12, rtol=1e-12)


def test_the_config_checks_the_spread(tmp_path):
    base = dict(task="majority", task_args={"num_marked": 5}, model=ModelConfig(vocab_size=5), length=32)
    for bad in (-0.1, 1.0, True, "0.5"):
        with pytest.raises(ValueError, match=r"TrainConfig\.length_spread = .*; expected a fraction in \[0, 1\)"):
            TrainConfig(**base, length_spread=bad)
    packed = dict(corpus="austen", tokenizer="byte", pack=True)
    with pytest.raises(ValueError, match=r"length_spread = 0\.5: the lm task's rows already pack documents"):
        TrainConfig(task="lm", task_args=packed, model=ModelConfig(vocab_size=256), length=32, length_spread=0.5)
    v5 = {k: v for k, v in TrainConfig(**base).to_dict().items() if k != "length_spread"} | {"version": 5}
    with pytest.raises(OldVersion, match=r"TrainConfig version 5, written by an earlier version of tra"):
        TrainConfig.from_dict(v5)
    assert TrainConfig.from_dict(upgrade_train_config(v5)).length_spread == 0.0  # 0.2 had one sequence per row


def test_a_spread_run_trains_and_resumes_bit_identically(tmp_path):
    model = ModelConfig(vocab_size=5, d_model=16, n_layers=1, n_heads=2)
    recipe = dict(steps=4, batch_size=8, eval_every=2, eval_sequences=8, checkpoint_every=2, length_spread=0.5)
    config = TrainConfig(task="majority", task_args={"num_marked": 3}, model=model, length=32, **recipe)
    train(config, tmp_path / "straight", progress=False)
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(list_checkpoints(tmp_path / "resumed")[-1])  # as if stopped after step 2
    train(config, tmp_path / "resumed", resume=True, progress=False)
    a, b = (
        TransformerLM.from_pretrained(resolve_checkpoint(tmp_path / n)).state_dict() for n in ("straight", "resumed")
    )
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize(
    "task,args,length,spread,expected",
    [
        ("hierarchy", {}, 126, 0.5, r"no valid length in \[63, 126\) to draw.*expected no spread"),
        ("mqar", {}, 38, 0.5, r"no valid length in \[19, 38\) to draw"),
        ("flipflop", {}, 16, 0.1, r"no valid length in \[15, 16\) to draw.*the nearest: \[10, 12, 14\]"),
    ],
)
def test_a_spread_that_no_shorter_valid_length_can_honour_is_refused(task, args, length, spread, expected):
    """Every document would be ``length`` tokens: recorded, it would do nothing."""
    vocab = make_task(task, **args).vocab_size
    with pytest.raises(ValueError, match=rf"TrainConfig\.length_spread = {spread}: the {task} task has {expected}"):
        TrainConfig(task=task, task_args=args, model=ModelConfig(vocab_size=vocab), length=length, length_spread=spread)


def test_text_windows_take_the_spread_as_synthetic_sequences_do():
    """A text window of length n is n + 1 tokens: rows as wide as the task's own, each window whole, the first
    token of each document no label (a label never crosses from one document to the next)."""
    task = make_task("lm", corpus="austen", tokenizer="byte")
    batch = spread_batch(task, 6, 64, seed=3, spread=0.5)
    assert batch.tokens.shape == task.sample(6, 64, 3).tokens.shape == (6, 65)
    text = task.sample(1, 64, 0).tokens  # any window's tokens: bytes of the corpus
    assert batch.tokens.max() < 256 and text.shape == (1, 65)
    segments = batch.model_args["segment_ids"]
    for row, mask in zip(segments, batch.loss_mask):
        for doc in row.unique().tolist():
            where = (row == doc).nonzero().flatten()
            if doc == PADDING:
                assert not mask[where].any()
                continue
            assert 33 <= where.numel() <= 65 and not mask[where[0]] and mask[where[1:]].all()


def test_tra_lm_train_takes_a_length_spread(tmp_path):
    """It used to fail in spread_batch: a text window is one token longer than its length."""
    from tra_attn.cli import main

    argv = ["train", "--task", "lm", "--out", str(tmp_path / "run"), "--length", "32", "--steps", "2"]
    argv += ["--batch-size", "4"]
    argv += ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--eval-sequences", "4", "--length-spread", "0.5"]
    assert main([*argv, "--no-progress"]) == 0
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step_0000002"]
