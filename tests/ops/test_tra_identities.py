"""Identities between TRA and its neighbours (docs/op_contract.md section 6), on every implementation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_close, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.alibi import alibi_attention, alibi_slopes
from tra_attn.ops.cope import contextual_positions
from tra_attn.ops.fox import forgetting_attention
from tra_attn.ops.masks import causal_mask
from tra_attn.ops.tra import keep_and_count

IMPLS = ["naive", "chunked", "cpu"]


@pytest.mark.parametrize("impl", IMPLS)
def test_no_threshold_constant_gate_equals_alibi(impl):
    b, h, s, d = 2, 4, 61, 16
    q, k, v, _ = tra_inputs(b, h, s, s, d, requires_grad=False)
    slopes = alibi_slopes(h).double()
    gate = (-slopes)[None, :, None].expand(b, h, s)
    out = threshold_relative_attention(q, k, v, gate, threshold=-math.inf, impl=impl)
    assert_close(out, alibi_attention(q, k, v, slopes), atol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
def test_no_threshold_constant_gate_equals_fox_with_constant_forget_gate(impl):
    b, h, s, d = 1, 3, 50, 8
    q, k, v, _ = tra_inputs(b, h, s, s, d, requires_grad=False)
    log_f = torch.tensor([-0.05, -0.7, -3.0], dtype=torch.float64)[None, :, None]
    out = threshold_relative_attention(q, k, v, log_f.expand(b, h, s), threshold=-math.inf, impl=impl)
    assert_close(out, forgetting_attention(q, k, v, log_f.expand(b, h, s)), atol=1e-12)


def test_alibi_slopes_standard_values():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)]))
    assert torch.allclose(alibi_slopes(4), torch.tensor([2.0 ** -(2 * (i + 1)) for i in range(4)]))
    six = alibi_slopes(6)  # 4 slopes of H=4, then every other slope of H=8: 2^-1, 2^-3
    assert torch.allclose(six, torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]))


def test_count_equals_cope_position_with_hard_gate():
    q, k, _, _ = tra_inputs(2, 2, 40, 40, 16, requires_grad=False)
    scores = q @ k.transpose(-1, -2) / 4
    keep, count = keep_and_count(scores, 0.0)
    hard_gates = (scores > 0).double() * causal_mask(40, 40)
    positions = contextual_positions(hard_gates)
    assert torch.equal(count.double() * keep, positions * keep)


def _irrelevant_keys(query: torch.Tensor, n: int, threshold: float, scale: float, gen) -> torch.Tensor:
    """n random keys whose score against ``query`` is at most ``threshold - 0.05``."""
    keys = torch.randn(n, query.shape[-1], generator=gen, dtype=torch.float64)
    # Remove the component along the query, then add one that puts the score below the threshold.
    unit = query / query.norm()
    keys = keys - (keys @ unit)[:, None] * unit
    target = threshold - 0.05 - torch.rand(n, generator=gen, dtype=torch.float64)
    return keys + (target / (scale * query.norm()))[:, None] * unit


@settings(max_examples=40, deadline=None)
@given(
    seq=st.integers(1, 40),
    n_insert=st.integers(1, 12),
    threshold=st.sampled_from([0.0, 0.25, -0.2]),
    gate=st.floats(-4.0, -0.01),
    seed=st.integers(0, 10_000),
    impl=st.sampled_from(IMPLS),
)
def test_inserting_irrelevant_keys_leaves_the_output_unchanged(seq, n_insert, threshold, gate, seed, impl):
    """Keys with s_ij <= threshold add no distance: inserting them anywhere before i changes nothing."""
    gen = torch.Generator().manual_seed(seed)
    d, scale = 8, 8**-0.5
    q = torch.randn(1, 1, 1, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, seq, d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 1, seq, d, generator=gen, dtype=torch.float64)
    g = torch.full((1, 1, 1), gate, dtype=torch.float64)
    before = threshold_relative_attention(q, k, v, g, scale=scale, threshold=threshold, impl=impl)

    new_k = _irrelevant_keys(q[0, 0, 0], n_insert, threshold, scale, gen)[None, None]
    new_v = torch.randn(1, 1, n_insert, d, generator=gen, dtype=torch.float64)
    # Insert before the query's own key (the last position), at random places.
    slots = torch.randint(0, seq, (n_insert,), generator=gen).sort().values.tolist()
    ks, vs, last = [], [], 0
    for i, slot in enumerate(slots):
        ks += [k[:, :, last:slot], new_k[:, :, i : i + 1]]
        vs += [v[:, :, last:slot], new_v[:, :, i : i + 1]]
        last = slot
    k2 = torch.cat(ks + [k[:, :, last:]], dim=2)
    v2 = torch.cat(vs + [v[:, :, last:]], dim=2)
    after = threshold_relative_attention(q, k2, v2, g, scale=scale, threshold=threshold, impl=impl)
    assert_close(after, before, atol=1e-12)
