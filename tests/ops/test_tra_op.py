"""The TRA op: the chunked path against the naive reference, forward and backward, edge cases, dtypes."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import assert_close, output_and_grads, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import KeepRule, tra_chunked, tra_naive
from tra_attn.ops.tra.chunked import bounded_shift
from tra_attn.ops.tra.naive import keep_mask

NAMES = ("out", "dq", "dk", "dv", "dgate")

# (B, H, Sq, Sk, D, block): odd lengths, lengths not a multiple of the block, Sq < Sk, one query.
SHAPES = [
    (2, 3, 37, 37, 16, 8),
    (1, 2, 130, 130, 32, 32),
    (1, 1, 257, 257, 64, 64),
    (1, 2, 65, 65, 128, 16),
    (2, 2, 20, 57, 16, 16),
    (1, 2, 1, 40, 8, 16),
    (1, 1, 33, 33, 8, 7),
    (1, 1, 1, 1, 8, 64),
    (1, 2, 100, 100, 24, None),
]


def _naive(scale, threshold):
    return lambda q, k, v, g: tra_naive(q, k, v, g, scale=scale, keep=KeepRule(threshold))


def _chunked(scale, threshold, block):
    return lambda q, k, v, g: tra_chunked(q, k, v, g, scale=scale, keep=KeepRule(threshold), block_size=block)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Sq{}-Sk{}-D{}-bn{}".format(*s))
@pytest.mark.parametrize("threshold", [0.0, 0.3, -0.5, -math.inf])
def test_chunked_matches_naive_fp64(shape, threshold):
    b, h, sq, sk, d, block = shape
    inputs = tra_inputs(b, h, sq, sk, d, seed=sq * 7 + d)
    grad_out = torch.randn(b, h, sq, d, dtype=torch.float64)
    scale = d**-0.5
    expected = output_and_grads(_naive(scale, threshold), inputs, grad_out)
    actual = output_and_grads(_chunked(scale, threshold, block), inputs, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-11, rtol=1e-11, name=name)


@pytest.mark.parametrize("gate_shift", [-6.0, 0.0, 6.0], ids=["strong-forget", "mid", "weak-forget"])
def test_chunked_matches_naive_across_gate_strengths(gate_shift):
    inputs = tra_inputs(2, 2, 90, 90, 32, gate_shift=gate_shift, seed=3)
    grad_out = torch.randn(2, 2, 90, 32, dtype=torch.float64)
    expected = output_and_grads(_naive(32**-0.5, 0.0), inputs, grad_out)
    actual = output_and_grads(_chunked(32**-0.5, 0.0, 16), inputs, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-11, rtol=1e-11, name=name)


def test_unnormalised_inputs_and_custom_scale():
    """The op uses q and k as given; large scores must not overflow the online softmax."""
    q, k, v, g = tra_inputs(1, 2, 70, 70, 16, seed=5)
    with torch.no_grad():
        q.mul_(6.0)
        k.mul_(3.0)
    grad_out = torch.randn(1, 2, 70, 16, dtype=torch.float64)
    expected = output_and_grads(_naive(0.9, 0.2), [q, k, v, g], grad_out)
    actual = output_and_grads(_chunked(0.9, 0.2, 16), [q, k, v, g], grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-10, rtol=1e-10, name=name)


@pytest.mark.parametrize("local_window", [0, 3])
def test_the_fixed_shift_and_the_running_maximum_both_give_tra(local_window):
    """The chunked forward shifts each row by smax_i + g_i when that is provably near its largest kept logit
    (docs/carry.md, section 3.3), extreme gates included, and by the running maximum when the scores are too
    large for the guarantee; both are TRA."""
    q, k, v, g = tra_inputs(1, 2, 70, 70, 16, dtype=torch.float32, seed=6, requires_grad=False)
    g[0, 0, ::7] = -1e4  # each kept key beyond the nearest one weighs exp(-1e4) of it
    grad_out = torch.randn(1, 2, 70, 16)
    for factor, fixed in ((1.0, True), (4.0, False)):  # smax = 16 factor^2 / 4: within the slack of 40, or not
        inputs = [t * factor if i < 2 else t for i, t in enumerate((q, k, v, g))]
        flat = [t.reshape(2, *t.shape[2:]) for t in inputs]
        assert (bounded_shift(flat[0], flat[1], flat[3], 0.25, 0.1, local_window) is not None) == fixed
        inputs = [t.clone().requires_grad_() for t in inputs]
        contract = {"scale": 0.25, "keep": KeepRule(0.1, local_window=local_window)}
        expected = output_and_grads(
            lambda *x, c=contract: tra_naive(*x, **c), [t.double() for t in inputs], grad_out.double()
        )
        actual = output_and_grads(lambda *x, c=contract: tra_chunked(*x, **c, block_size=16), inputs, grad_out)
        for name, a, e in zip(NAMES, actual, expected):
            assert_close(a, e, atol=2e-5 * max(1.0, e.abs().max().item()), name=f"{name}, fixed shift {fixed}")


@pytest.mark.parametrize("sq,sk,block", [(9, 9, 4), (6, 11, 4), (1, 7, 3)])
def test_chunked_gradcheck(sq, sk, block):
    q, k, v, g = tra_inputs(1, 2, sq, sk, 4, seed=11)
    # Keep every score away from the threshold so finite differences do not flip the keep mask.
    scores = q @ k.transpose(-1, -2) / 2
    assert scores.abs().min() > 1e-4

    def fn(q, k, v, g):
        return tra_chunked(q, k, v, g, scale=0.5, keep=KeepRule(0.0), block_size=block)

    assert torch.autograd.gradcheck(fn, (q, k, v, g), eps=1e-6, atol=1e-7)


def _with_empty_rows(dtype, rows=(0, 3, 17, 18, 40)):
    q, k, v, g = tra_inputs(2, 2, 48, 48, 16, dtype=dtype, seed=2, requires_grad=False)
    q[:, :, list(rows)] = 0  # every score of these rows is 0, which is not above the threshold 0
    return [t.requires_grad_() for t in (q, k, v, g)], list(rows)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_rows_with_no_kept_key_are_exact_zeros(dtype, impl):
    (q, k, v, g), rows = _with_empty_rows(dtype)
    out = threshold_relative_attention(q, k, v, g, impl=impl)
    grad_out = torch.randn_like(out)
    dq, dk, dv, dg = torch.autograd.grad(out, (q, k, v, g), grad_out)
    for t in (out, dq, dk, dv, dg):
        assert torch.isfinite(t).all()
    assert (out[:, :, rows] == 0).all()
    assert (dq[:, :, rows] == 0).all()
    assert (dg[:, :, rows] == 0).all()
    has_key = keep_mask(q.double() @ k.double().transpose(-1, -2), 0.0).any(-1)
    assert not has_key[:, :, rows].any()
    assert ((out.abs().sum(-1) > 0) == has_key).all()  # exactly the rows without a kept key are 0


def test_all_rows_empty():
    q, k, v, g = tra_inputs(1, 2, 30, 30, 8, dtype=torch.float32)
    out = threshold_relative_attention(q, k, v, g, threshold=100.0)
    grads = torch.autograd.grad(out.sum(), (q, k, v, g))
    assert (out == 0).all()
    assert all((t == 0).all() for t in grads)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_low_precision_close_to_fp64_reference(dtype, atol):
    """Inputs rounded to the low-precision dtype; the reference runs in fp64 on the same values."""
    b, h, s, d = 2, 2, 150, 32
    low = tra_inputs(b, h, s, s, d, dtype=dtype, seed=4)
    grad_out = torch.randn(b, h, s, d).to(dtype)
    ref = [t.detach().double().requires_grad_() for t in low]
    expected = output_and_grads(_naive(d**-0.5, 0.0), ref, grad_out.double())
    actual = output_and_grads(_chunked(d**-0.5, 0.0, 32), low, grad_out)
    assert actual[0].dtype == dtype
    for name, a, e in zip(NAMES, actual, expected):
        scale = e.abs().max().item()
        assert_close(a, e, atol=atol * max(scale, 1.0), name=name)


@pytest.mark.parametrize("impl", ["auto", "naive", "chunked"])
def test_public_op_dispatch_and_noncontiguous_inputs(impl):
    b, s, h, d = 2, 45, 3, 16
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, generator=gen).transpose(1, 2) for _ in range(3))  # strided
    g = -torch.rand(b, h, s, generator=gen)
    out = threshold_relative_attention(q, k, v, g, impl=impl)
    ref = tra_naive(q.contiguous(), k.contiguous(), v.contiguous(), g, scale=d**-0.5, keep=KeepRule(0.0))
    assert_close(out, ref, atol=1e-5, name=impl)


def test_default_scale_and_threshold():
    q, k, v, g = tra_inputs(1, 1, 20, 20, 16, requires_grad=False)
    out = threshold_relative_attention(q, k, v, g)
    assert_close(out, tra_naive(q, k, v, g, scale=0.25, keep=KeepRule(0.0)), atol=1e-12)


def test_chunked_default_block_handles_long_decode_context():
    """Sq = 1 against a long cache (one wide block) and a multi-block prefill chunk."""
    for sq in (1, 3, 80):
        q, k, v, g = tra_inputs(1, 2, sq, 700, 16, requires_grad=False, seed=sq)
        out = threshold_relative_attention(q, k, v, g, impl="chunked")
        assert_close(out, tra_naive(q, k, v, g, scale=0.25, keep=KeepRule(0.0)), atol=1e-12, name=f"Sq={sq}")


def test_query_rows_match_prefill_rows():
    """Queries at the last Sq positions give the same outputs as the same rows of a full prefill."""
    q, k, v, g = tra_inputs(1, 2, 64, 64, 16, requires_grad=False)
    full = threshold_relative_attention(q, k, v, g)
    tail = threshold_relative_attention(q[:, :, 50:], k, v, g[:, :, 50:])
    assert_close(tail, full[:, :, 50:], atol=1e-12)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_an_enclosing_autocast_does_not_change_the_op(impl):
    q, k, v, g = tra_inputs(1, 2, 70, 70, 16, dtype=torch.float32)
    grad_out = torch.randn(1, 2, 70, 16)
    expected = output_and_grads(lambda *x: threshold_relative_attention(*x, impl=impl), [q, k, v, g], grad_out)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = threshold_relative_attention(q, k, v, g, impl=impl)
    actual = [out, *torch.autograd.grad(out, (q, k, v, g), grad_out)]
    for name, a, e in zip(NAMES, actual, expected):
        assert a.dtype == torch.float32
        assert_close(a, e, atol=1e-6, name=name)
