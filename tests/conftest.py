"""Shared test helpers: random TRA inputs and a closeness check that reports the worst element."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tra_attn.layers.norms import rms_normalize


def tra_inputs(b, h, sq, sk, d, dtype=torch.float64, gate_shift=-1.0, seed=0, requires_grad=True):
    """RMS-normalised q/k (as the TRA layer feeds the op), random v and a logsigmoid gate."""
    gen = torch.Generator().manual_seed(seed)
    q = rms_normalize(torch.randn(b, h, sq, d, generator=gen, dtype=torch.float64), 1e-6)
    k = rms_normalize(torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64), 1e-6)
    v = torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64)
    g = F.logsigmoid(2 * torch.randn(b, h, sq, generator=gen, dtype=torch.float64) + gate_shift)
    out = [q.to(dtype), k.to(dtype), v.to(dtype), g.to(dtype if dtype == torch.float64 else torch.float32)]
    return [t.requires_grad_(requires_grad) for t in out]


def output_and_grads(fn, inputs, grad_out):
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_out)
    return [out, *grads]


def assert_close(actual, expected, atol, rtol=0.0, name=""):
    actual, expected = actual.detach().double(), expected.detach().double()
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    assert torch.isfinite(actual).all(), f"{name}: non-finite values"
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    worst = (err - bound).argmax()
    got, want = actual.flatten()[worst].item(), expected.flatten()[worst].item()
    assert (err <= bound).all(), (
        f"{name}: max |err| {err.max().item():.3e} (at {worst.item()}: {got:.6g} vs {want:.6g}), "
        f"atol {atol}, rtol {rtol}"
    )
