"""The backward flushes weights below 2^-60 of their row to zero (ops/tra/denormals.py): no subnormal operand
slows the CPU's products, and the gradients stay what the fp64 reference computes."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import assert_close, output_and_grads, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra.denormals import FLUSH_BELOW, flush_tiny_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weights_at_or_below_the_bound_become_zero_and_the_rest_stay(dtype):
    bound = FLUSH_BELOW[dtype]
    weights = torch.tensor([0.0, bound / 2, bound, bound * 2, 2.0**-10, 1.0], dtype=dtype)
    assert flush_tiny_(weights.clone()).tolist() == [0.0, 0.0, 0.0, bound * 2, 2.0**-10, 1.0]


@pytest.mark.parametrize("options", [{}, {"local_window": 4, "keep_surrogate": 1.0}], ids=["exact", "surrogate"])
def test_fp32_backward_with_tiny_gradients_and_tiny_weights_matches_the_fp64_reference(options):
    """Strong gates (weights of far keys down to the exp floor) and an output gradient of 1e-7 (a mean over many
    tokens): the products the flush removes were subnormal, and the fp32 gradients still match fp64."""
    inputs64 = tra_inputs(2, 2, 300, 300, 16, gate_shift=2.0, seed=3)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs64]
    grad_out = 1e-7 * torch.randn(2, 2, 300, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = output_and_grads(lambda *x: threshold_relative_attention(*x, impl="naive", **options), inputs64, grad_out)
    got = output_and_grads(
        lambda *x: threshold_relative_attention(*x, impl="chunked", **options), inputs32, grad_out.float()
    )
    for name, g, w in zip(("out", "dq", "dk", "dv", "dgate"), got, want):
        assert_close(g, w, atol=2e-5 * w.abs().max().item(), name=name)
