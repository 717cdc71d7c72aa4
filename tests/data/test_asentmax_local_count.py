"""The ASEntmax suite's local count task: blocks of repeats, every token labelled with its count, lengths."""

from __future__ import annotations

import pytest
import torch

from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.data.synthetic.asentmax_local_count import run_counts
from tra_attn.data.task import TEST_SEED
from tra_attn.metrics import sequence_metrics
from tra_attn.models import ModelConfig
from tra_attn.training.length_spread import spread_batch, spread_lengths
from tra_attn.training.loop import IGNORE_INDEX, inputs_and_labels

# SimpleTokenizer(max_vocab_id=15): data 0..15, pad 16, bos 17, eos 18, mask 19, sep 20; counts y0..y47 = 21..68.
BOS, EOS, LABEL0 = 17, 18, 21


def blocks(source: torch.Tensor) -> list[list[tuple[int, int]]]:
    """(symbol, length) of every block of every row."""
    out = []
    for row in source.tolist():
        runs = []
        for t in row:
            if runs and runs[-1][0] == t:
                runs[-1] = (t, runs[-1][1] + 1)
            else:
                runs.append((t, 1))
        out.append(runs)
    return out


def test_samples_follow_the_authors_blocks_and_label_every_token_with_its_count():
    task = make_task("asentmax_local_count")
    assert task.vocab_size == 16 + 5 + 48
    batch = task.sample(300, 130, seed=1)
    t = batch.tokens
    assert t.shape == (300, 130) and (t[:, 0] == BOS).all() and (t[:, -1] == EOS).all()
    source = t[:, 1:-1]
    assert source.min() == 0 and source.max() == 15
    rows = blocks(source)
    inner = [length for runs in rows for _, length in runs[:-1]]  # every block but the cut last one
    assert min(inner) == 2 and max(inner) == 48  # uniform in 2..max_reps
    assert abs(sum(inner) / len(inner) - 25) < 2
    assert all(runs[-1][1] <= 48 for runs in rows)
    # The prediction at source token j (position j) is scored against its 0-based index in its block, which the
    # model never reads: targets[:, j + 1], every one of them scored.
    expected = [[c for _, r in runs for c in range(r)] for runs in rows]
    assert (batch.targets[:, 2:] - LABEL0).tolist() == expected
    mask = torch.ones_like(t, dtype=torch.bool)
    mask[:, :2] = False
    assert torch.equal(batch.loss_mask, mask) and torch.equal(task.loss_mask(t), mask)
    assert not bool((t >= LABEL0).any())  # no count is an input


def test_a_model_is_scored_on_the_counts_not_on_the_next_tokens():
    task = make_task("asentmax_local_count", max_reps=5, num_symbols=4)
    batch = task.sample(4, 20, seed=0)
    counts = batch.targets

    class Oracle(torch.nn.Module):  # predicts position j's count from the tokens up to j
        config = ModelConfig(vocab_size=task.vocab_size)

        def forward(self, x):
            labels = run_counts(x[:, 1:]) + task.label0
            predicted = torch.cat([labels[:, :1], labels], dim=1)  # position 0 (<bos>) is not scored
            return torch.nn.functional.one_hot(predicted, task.vocab_size).float()

    assert sequence_metrics(Oracle(), batch.tokens, batch.loss_mask, targets=counts)["full_seq_acc"] == 1.0
    assert task.metrics(Oracle(), batch)["full_seq_acc"] == 1.0
    assert sequence_metrics(Oracle(), batch.tokens, batch.loss_mask)["token_acc"] == 0.0  # next tokens: none


def test_training_minimises_the_loss_on_the_counts():
    inputs, labels = inputs_and_labels(make_task("asentmax_local_count").sample(2, 30, seed=0))
    assert inputs.shape == labels.shape == (2, 29)
    assert (labels[:, 0] == IGNORE_INDEX).all() and (labels[:, 1:] >= LABEL0).all()


def test_the_authors_lengths_vary_as_the_docstring_says():
    # generate_data.py LocalCount: s uniform in 64..128 (--seq_len 96 --vary_len 32), s // ((max_reps + 2) / 2)
    # whole blocks of 2..max_reps tokens; the module's docstring states the lengths this gives.
    gen = torch.Generator().manual_seed(0)
    s = torch.randint(64, 129, (200_000,), generator=gen)
    reps = torch.randint(2, 49, (200_000, 5), generator=gen)
    lengths = torch.where(torch.arange(5) < (s // 25)[:, None], reps, 0).sum(1).double()
    five_to_95 = torch.tensor([0.05, 0.95], dtype=torch.float64)
    assert (2 * 2, 5 * 48) == (4, 240) and round(lengths.mean().item()) == 83
    assert torch.allclose(torch.quantile(lengths[:100_000], five_to_95), torch.tensor([33.0, 139.0]).double(), atol=1)
    test = torch.randint(2, 49, (20_000, 512 // 25), generator=gen).sum(1).double()
    assert torch.allclose(torch.quantile(test, five_to_95), torch.tensor([401.0, 600.0]).double(), atol=2)
    doc = __import__("tra_attn.data.synthetic.asentmax_local_count", fromlist=["x"]).__doc__
    assert "4 to 240 tokens (mean 83; 33 to 139 in 90% of them)" in doc and "401 to 600 in 90%" in doc


def test_run_counts_are_the_authors_labels():
    # generate_data.py LocalCount: counts 1..reps per block, minus 1.
    assert run_counts(torch.tensor([[3, 3, 3, 9, 9, 0, 0, 0, 0]])).tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]


def test_determinism_and_round_trip(tmp_path):
    task = make_task("asentmax_local_count", max_reps=5, num_symbols=4)
    batch = task.sample(6, 30, 3)
    assert torch.equal(batch.tokens, task.sample(6, 30, 3).tokens)
    assert not torch.equal(batch.tokens, task.sample(6, 30, 4).tokens)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (back,) = task.read_text(path)
    for name in ("tokens", "loss_mask", "targets"):
        assert torch.equal(getattr(back, name), getattr(batch, name))
    assert task.decode_text(task.encode_text("<bos> 3 3 3 1 1 0 <eos> y0 y1 y2 y0 y1 y0")).endswith("y1 y0")
    with pytest.raises(ValueError, match=r"malformed .*the counts are y0 y1 y2 y0 y0; expected y0 y1 y2 y0 y1, each"):
        task.encode_text("<bos> 3 3 3 1 1 <eos> y0 y1 y2 y0 y0")
    with pytest.raises(ValueError, match=r"malformed .*the counts are y0 y1; expected y0 y1 y0"):
        task.encode_text("<bos> 3 3 1 <eos> y0 y1")
    with pytest.raises(ValueError, match=r"asentmax_local_count: malformed .*longer than max_reps = 5"):
        task.encode_text("<bos> 3 3 3 3 3 3 <eos> y0 y1 y2 y3 y4 y4")
    for line in ("<bos> 3 3 y1 <eos>", "<bos> 3 3 <eos> 3 y0 y1", "<bos> 3 3 y0 y1", "3 3 <eos> y0 y1"):
        with pytest.raises(ValueError, match=r"malformed .*expected <bos>, source tokens, <eos> and a count"):
            task.encode_text(line)


def test_eval_splits_and_the_training_range():
    task = make_task("asentmax_local_count", longest_test=4096)
    splits = task.eval_splits(130, 4)
    assert [(s.params["seq_len"], s.batch.tokens.shape) for s in splits] == [  # the budget to seq_len 1024
        (64, (4, 66)), (128, (4, 130)), (256, (4, 258)), (512, (4, 514)), (1024, (4, 1026)), (2048, (2, 2050)),
        (4096, (1, 4098))
    ]  # fmt: skip
    assert torch.equal(splits[1].batch.targets, task.sample(4, 130, TEST_SEED + 1).targets)
    length, spread = training_lengths(task)
    assert length == 130 and spread_lengths(task, length, spread) == list(range(66, 131))  # n = 64..128
    packed = spread_batch(task, 8, length, seed=5, spread=spread)  # documents of 64..128 counts, packed in rows
    assert packed.targets.shape == packed.tokens.shape
    assert (packed.targets[packed.loss_mask] >= LABEL0).all() and (packed.tokens[packed.loss_mask] < LABEL0).all()


def test_statistics():
    task = make_task("asentmax_local_count")
    stats = task.statistics(task.sample(50, 130, 0))
    assert stats["seq_len"] == 128 and 2 < stats["blocks_per_sequence"] < 20 and 0 <= stats["mean_count"] < 48


@pytest.mark.parametrize(
    "args,message",
    [
        ({"num_symbols": 1}, r"num_symbols = 1; expected an integer >= 2"),
        ({"max_reps": 1}, r"max_reps = 1; expected an integer >= 2"),
        ({"longest_test": 63}, r"longest_test = 63; expected an integer >= 64"),
    ],
)
def test_bad_parameters(args, message):
    with pytest.raises(ValueError, match=rf"asentmax_local_count: {message}"):
        make_task("asentmax_local_count", **args)


@pytest.mark.parametrize("length", [0, 2, 10.0, False])
def test_bad_length(length):
    with pytest.raises(ValueError, match=r"asentmax_local_count: length = .*expected n \+ 2 tokens"):
        make_task("asentmax_local_count").sample(1, length, 0)


def test_tra_trains_on_the_counts_with_packed_lengths_and_evaluates_a_text_file(tmp_path, capsys):
    from tests.cli.test_cli import TINY_TRAIN, run

    args = ["--task", "asentmax_local_count", "--task-arg", "max_reps=5", "--task-arg", "num_symbols=4"]
    code, _, err = run(["train", *args, "--length", "30", "--length-spread", "0.5", "--out", tmp_path / "run",
                        *TINY_TRAIN], capsys)  # fmt: skip
    assert code == 0, err
    task = make_task("asentmax_local_count", max_reps=5, num_symbols=4)
    task.write_text(tmp_path / "counts.txt", task.sample(3, 30, seed=9))
    code, out, err = run(["eval", "--checkpoint", tmp_path / "run", "--data", tmp_path / "counts.txt"], capsys)
    assert code == 0, err
    header, row = out.strip().splitlines()[-2:]
    metrics = dict(zip(header.split(), row.split()))
    assert metrics["sequences"] == "3" and metrics["scored_tokens"] == str(3 * 28)  # every count of 28 tokens
