"""Logit dropout as a pure function of (seed, b, h, i, j) (ops/tra/dropout.py, docs/op_contract.md section 5): the
hash itself, the mask's statistics, its independence of the call's layout, and a resumed training run."""

from __future__ import annotations

import shutil

import torch

from tests.conftest import tra_inputs
from tra_attn import ModelConfig, TransformerLM, threshold_relative_attention
from tra_attn.ops.tra import dispatch
from tra_attn.ops.tra.dropout import LogitDropout, dropped, mix
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import resolve_checkpoint
from tra_attn.utils.jsonl import read_jsonl


def mask(p, seed, b=2, h=3, sq=40, sk=40):
    dropout = LogitDropout(p, seed, b, h, sq, sk, "cpu")
    return dropped(dropout.rows[..., None], dropout.cols, dropout.p32)


def reference_hash(seed: int, b: int, h: int, i: int, j: int) -> int:
    """u(seed, b, h, i, j) of docs/op_contract.md, section 5, on Python integers."""

    def mix(x):
        x ^= x >> 16
        x = (x * 0x21F0AAAD) % 2**32
        x ^= x >> 15
        x = (x * 0x735A2D97) % 2**32
        return x ^ (x >> 15)

    seed %= 2**64
    key = mix(mix(mix(mix((seed % 2**32) ^ 0x9E3779B9) ^ (seed >> 32)) ^ b) ^ h)
    x = mix(key ^ i) ^ mix(j ^ 0x85EBCA6B)
    x ^= x >> 16
    x = (x * 0x21F0AAAD) % 2**32
    x ^= x >> 15
    x = (x * 0x735A2D97) % 2**32
    return x ^ 2**31


def test_the_tensor_hash_is_the_documented_one():
    """The int32 tensor arithmetic (wrapping multiplications, logical shifts) against the definition on Python
    integers, for seeds of both signs and both words; the mixer's values pin the definition itself, since a
    resumed run must draw the masks of the run it continues."""
    assert mix(torch.tensor([0, 1, 2**32 - 1])).tolist() == [0, 2261973619, 2578835075]
    for seed in (0, 1, -1, 2**40 + 5, -(2**63), 2**63 - 1):
        for p in (0.1, 0.5, 0.9):
            actual = mask(p, seed)
            expected = torch.tensor(
                [
                    [[[reference_hash(seed, b, h, i, j) < int(p * 2**32) for j in range(40)] for i in range(40)]]
                    for b, h in ((0, 0), (1, 2))
                ]
            )
            assert torch.equal(actual[[0, 1], [0, 2]][:, None], expected), (seed, p)


def test_the_mask_drops_a_fraction_p_with_no_structure():
    m = mask(0.3, 12345, b=2, h=4, sq=256, sk=256).double()
    assert abs(m.mean().item() - 0.3) < 0.005
    assert abs(m.mean(-1).std().item() - (0.3 * 0.7 / 256) ** 0.5) < 0.01  # rows: binomial spread only
    assert abs(m.mean(-2).std().item() - (0.3 * 0.7 / 256) ** 0.5) < 0.01  # columns too
    centred = m - m.mean()
    for a, b in (((0, 0, 5), (0, 0, 6)), ((0, 0, 5), (0, 1, 5)), ((0, 0, 5), (1, 0, 5))):  # rows, heads, batch
        assert abs((centred[a] * centred[b]).mean().item()) < 0.03
    assert mask(0.0, 1).sum() == 0 and mask(0.999999, 1).all()


def test_the_seed_forms_agree_and_different_seeds_differ():
    assert torch.equal(mask(0.4, 7), mask(0.4, torch.tensor(7)))
    assert torch.equal(mask(0.4, -1), mask(0.4, 2**64 - 1))  # integers modulo 2^64
    assert torch.equal(mask(0.4, torch.tensor(-3, dtype=torch.int32)), mask(0.4, -3))
    assert not torch.equal(mask(0.4, 7), mask(0.4, 8))
    assert not torch.equal(mask(0.4, 2**32 + 7), mask(0.4, 7))  # the seed's high word counts


def test_the_mask_depends_on_positions_not_on_the_call():
    """Query i keeps its mask whether it comes with all the others or alone after a cache (positions are
    absolute), and a batch entry or head keeps its own whatever the batch or the number of heads."""
    q, k, v, g = tra_inputs(2, 3, 30, 30, 8, requires_grad=False)
    for impl in ("naive", "chunked"):
        full = threshold_relative_attention(q, k, v, g, impl=impl, logit_dropout=0.5, dropout_seed=9)
        tail = threshold_relative_attention(
            q[:, :, -7:], k, v, g[:, :, -7:], impl=impl, logit_dropout=0.5, dropout_seed=9
        )
        torch.testing.assert_close(tail, full[:, :, -7:], atol=1e-14, rtol=0)
        first = threshold_relative_attention(
            q[:1, :2], k[:1, :2], v[:1, :2], g[:1, :2], impl=impl, logit_dropout=0.5, dropout_seed=9
        )
        torch.testing.assert_close(first, full[:1, :2], atol=1e-14, rtol=0)


def test_a_resumed_tra_run_with_attention_dropout_is_bit_identical(tmp_path, monkeypatch):
    """The layer's dropout seed comes from torch's generator, which checkpoints carry: a resumed run draws the
    masks the uninterrupted one drew. The keep surrogate with dropout runs the chunked path here (the
    materialised paths are switched off)."""
    monkeypatch.setattr(dispatch, "tra_surrogate", None)
    monkeypatch.setattr(dispatch, "tra_naive", None)
    model = ModelConfig(
        vocab_size=6,
        d_model=16,
        n_layers=2,
        n_heads=2,
        attention="tra",
        attention_dropout=0.2,
        attention_options={"keep_surrogate": 0.5, "local_window": 2},
    )
    config = TrainConfig(
        task="flipflop",
        task_args={"p_ignore": 0.8, "final_read": True},
        model=model,
        length=24,
        steps=6,
        batch_size=4,
        lr=3e-3,
        log_every=1,
        eval_every=0,
        checkpoint_every=3,
    )
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(config, straight, progress=False)
    train(config, resumed, progress=False)
    shutil.rmtree(resumed / "checkpoints" / "step_0000006")  # back to the step-3 checkpoint
    train(config, resumed, resume=True, progress=False)
    weights = [TransformerLM.from_pretrained(resolve_checkpoint(run)).state_dict() for run in (straight, resumed)]
    for name, value in weights[0].items():
        assert torch.equal(value, weights[1][name]), name
    losses = [[r["loss"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r] for run in (straight, resumed)]
    assert losses[0] == losses[1] and len(losses[0]) == 6
