"""Early exit (prune_tau) in the chunked path: the skipped mass stays under exp(-tau), and the
forward and backward compute exactly TRA over the keys that were visited."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import assert_close, naive_with_key_start, output_and_grads, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.masks import masked_softmax
from tra_attn.ops.tra import KeepRule, tra_naive
from tra_attn.ops.tra.chunked import chunked_forward_stats, tra_chunked
from tra_attn.ops.tra.naive import keep_and_count

EXACT = KeepRule(0.0)
GATES = {"strong": -4.0, "mid": 0.0, "weak": 4.0}


def exact_weights(q, k, g, scale):
    scores = scale * q @ k.transpose(-1, -2)
    keep, count = keep_and_count(scores, 0.0)
    return masked_softmax(scores + g[..., None] * count, keep)


@pytest.mark.parametrize("gate", GATES, ids=str)
@pytest.mark.parametrize("tau", [3.0, 8.0])
def test_skipped_mass_and_output_change_stay_under_the_bound(gate, tau):
    q, k, v, g = tra_inputs(2, 2, 300, 300, 32, gate_shift=GATES[gate], requires_grad=False)
    scale = 32**-0.5
    out, _, _, key_start = chunked_forward_stats(q, k, v, g, scale=scale, keep=EXACT, block_size=32, prune_tau=tau)
    weights = exact_weights(q, k, g, scale)
    skipped = (weights * (torch.arange(300) < key_start[..., None])).sum(-1)
    assert skipped.max() <= math.exp(-tau)
    exact = tra_naive(q, k, v, g, scale=scale, keep=EXACT)
    assert (out - exact).abs().max() <= 2 * math.exp(-tau) * v.abs().max()
    if gate == "strong":
        assert (key_start > 0).float().mean() > 0.5  # most rows stop early
    if gate == "weak" and tau == 8.0:
        assert (key_start == 0).float().mean() > 0.9  # slowly forgetting rows see (almost) everything


@pytest.mark.parametrize("gate", GATES, ids=str)
def test_pruned_forward_and_backward_are_tra_over_the_visited_keys(gate):
    q, k, v, g = tra_inputs(1, 3, 150, 170, 16, gate_shift=GATES[gate])
    scale, tau = 0.25, 4.0
    grad_out = torch.randn(1, 3, 150, 16, dtype=torch.float64)
    contract = {"scale": scale, "keep": EXACT, "block_size": 16, "prune_tau": tau}
    key_start = chunked_forward_stats(q, k, v, g, **contract)[3]
    actual = output_and_grads(lambda *x: tra_chunked(*x, **contract), [q, k, v, g], grad_out)
    expected = output_and_grads(lambda *x: naive_with_key_start(*x, scale, 0.0, key_start), [q, k, v, g], grad_out)
    for name, a, e in zip(("out", "dq", "dk", "dv", "dgate"), actual, expected):
        assert_close(a, e, atol=1e-11, rtol=1e-11, name=name)


def test_rows_without_forgetting_never_stop():
    q, k, v, _ = tra_inputs(1, 2, 200, 200, 16, requires_grad=False)
    zero_gate = torch.zeros(1, 2, 200, dtype=torch.float64)
    key_start = chunked_forward_stats(q, k, v, zero_gate, scale=0.25, keep=EXACT, block_size=16, prune_tau=2.0)[3]
    assert (key_start == 0).all()


def test_public_op_prune_tau_and_its_validation():
    q, k, v, g = tra_inputs(1, 2, 90, 90, 16, gate_shift=-3.0, requires_grad=False)
    out = threshold_relative_attention(q, k, v, g, prune_tau=6.0)
    assert (out - threshold_relative_attention(q, k, v, g)).abs().max() <= 2 * math.exp(-6.0) * v.abs().max()
    for bad in (0.0, -1.0, math.inf, "5"):
        with pytest.raises(ValueError, match=r"prune_tau = .*expected None or a finite positive number"):
            threshold_relative_attention(q, k, v, g, prune_tau=bad)
