"""Masked-sequence metrics on hand-made flip-flop cases (an exact solver with injected mistakes), and the
evaluation of a trained checkpoint."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
from torch import nn

from tests.training.test_train import tiny
from tra_attn import ModelConfig
from tra_attn.data import split_sequences
from tra_attn.data.synthetic import majority
from tra_attn.data.synthetic.flipflop import ONE, READ, VOCAB_SIZE, WRITE, ZERO, FlipFlop, split_params
from tra_attn.layers import TRAOptions
from tra_attn.metrics import eval_batch_size, sequence_metrics
from tra_attn.training import train
from tra_attn.training.evaluation import evaluate_checkpoint


class FlipFlopSolver(nn.Module):
    """Predicts the last written bit after every read; flips its answer at the given (row, position)s."""

    def __init__(self, mistakes=()):
        super().__init__()
        self.config = SimpleNamespace(n_heads=1, attention="tra", attention_options=TRAOptions())
        self.mistakes = set(mistakes)
        self.offset = 0  # row offset of the current batch

    def forward(self, tokens):
        n, length = tokens.shape
        logits = torch.zeros(n, length, VOCAB_SIZE)
        for r in range(n):
            last = None
            for t in range(length):
                if t % 2 == 1 and tokens[r, t - 1] == WRITE:
                    last = int(tokens[r, t])
                if tokens[r, t] == READ:
                    answer = last
                    if (self.offset + r, t + 1) in self.mistakes:
                        answer = ONE if last == ZERO else ZERO
                    logits[r, t, answer] = 10.0
        self.offset += n
        return logits


def test_perfect_predictions():
    batch = FlipFlop(0.5, final_read=True).sample(12, 20, seed=0)
    m = sequence_metrics(FlipFlopSolver(), batch.tokens, batch.loss_mask)
    assert m["full_seq_acc"] == 1.0 and m["token_acc"] == 1.0
    assert m["sequences"] == 12 and m["scored_tokens"] == int(batch.loss_mask.sum())
    assert m["loss"] < 1e-3


def test_one_mistake_fails_the_whole_sequence():
    batch = FlipFlop(0.5, final_read=True).sample(10, 20, seed=1)
    reads = batch.loss_mask.nonzero().tolist()
    rows = {r for r, _ in reads}
    # Two mistakes in one sequence, one in another: 2 of 10 sequences fail.
    first, second = sorted(rows)[:2]
    positions = [tuple(x) for x in reads if x[0] == first][:2] + [tuple(x) for x in reads if x[0] == second][:1]
    m = sequence_metrics(FlipFlopSolver(positions), batch.tokens, batch.loss_mask)
    assert m["full_seq_acc"] == 0.8
    assert math.isclose(m["token_acc"], 1 - 3 / len(reads))


def test_sequences_without_reads_are_left_out():
    tokens = torch.tensor([[WRITE, ONE, READ, ONE], [WRITE, ZERO, WRITE, ONE]])
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, 3] = True
    m = sequence_metrics(FlipFlopSolver(), tokens, mask)
    assert m["sequences"] == 1 and m["full_seq_acc"] == 1.0


def eval_splits_and_sizes():
    assert split_params(128) == [
        ("iid", 0.8, 128),
        ("sparse", 0.98, 128),
        ("dense", 0.1, 128),
        ("iid", 0.8, 256),
        ("iid", 0.8, 512),
        ("iid", 0.8, 1024),
        ("sparse", 0.98, 1024),
    ]
    assert [split_sequences(1000, 128, n) for n in (128, 256, 1024)] == [1000, 500, 125]


def test_evaluation_batches_are_sized_per_attention_kind():
    """A token budget for every kind; a (B, H, S, S) score budget only for kinds that materialise scores."""
    from tra_attn import ModelConfig

    tra, cope = ModelConfig(n_heads=4, attention="tra"), ModelConfig(n_heads=4, attention="cope")
    assert eval_batch_size(tra, 128) == 128 and eval_batch_size(cope, 128) == 64
    assert eval_batch_size(tra, 512) == 32 and eval_batch_size(cope, 512) == 4
    assert eval_batch_size(tra, 1024) == 16 and eval_batch_size(cope, 1024) == 1


def test_naming_the_runs_own_task_keeps_its_task_arguments(tmp_path):
    """`tra eval --task` with the run's own task evaluates the splits of the run's task arguments (3 marked
    bits here, not majority's default 7), as without --task."""
    model = ModelConfig(vocab_size=majority.VOCAB_SIZE, d_model=16, n_layers=1, n_heads=2, attention="tra")
    config = tiny(task="majority", task_args={"num_marked": 3}, model=model, length=64, steps=2, eval_every=0)
    train(config, tmp_path, progress=False)
    rows = evaluate_checkpoint(tmp_path, sequences=8)
    assert evaluate_checkpoint(tmp_path, sequences=8, task="majority") == rows
