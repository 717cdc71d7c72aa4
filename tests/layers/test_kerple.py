"""The ``kerple`` kind against its authors' code: KERPLE-log as chijames/KERPLE implements it.

Ported below from chijames/KERPLE, commit 25be3d712e96a3353b374f1f8e36b97d86f97ffa: ``megatron/mpu/layers.py``
(class ``ParallelKerpleLog``: parameters bias_p = r1 ~ U(0, 2) and bias_a = r2 ~ U(0, 1) per head, clamped in
place to eps = 0.01, and its forward with the cached distance matrix and the decoding branch), without
model parallelism and with the parameters on the CPU; and from ``megatron/model/transformer.py``
(``ParallelSelfAttention.attention``) the scores q k^T / norm_factor passed through the bias, then the causal
mask and the softmax.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import Parameter

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import KERPLEAttention, KERPLEOptions
from tra_attn.ops.kerple import kerple_attention


class PortedKerpleLog(torch.nn.Module):
    """chijames/KERPLE's ParallelKerpleLog for one model-parallel rank (the port: names and arithmetic as there)."""

    def __init__(self, heads, dtype=torch.float64):
        super().__init__()
        self.heads = heads
        self.num_heads_per_partition = heads
        self.eps = 1e-2

        def get_parameter(scale, init_method):
            if init_method == "ones":
                return Parameter(torch.ones(self.num_heads_per_partition, dtype=dtype)[:, None, None] * scale)
            elif init_method == "uniform":
                return Parameter(torch.rand(self.num_heads_per_partition, dtype=dtype)[:, None, None] * scale)

        self.bias_p = get_parameter(2, "uniform")
        self.bias_a = get_parameter(1, "uniform")
        self.cached_matrix = None
        self.cached_seq_len = None

    def forward(self, x):
        seq_len_q = x.shape[-2]
        seq_len_k = x.shape[-1]
        if self.cached_seq_len != seq_len_k:
            diff = torch.tril(
                torch.arange(seq_len_k, device=x.device).view(seq_len_k, 1).repeat(1, seq_len_k)
                + torch.arange(0, -seq_len_k, -1, device=x.device)
            )
            diff = diff.to(x.dtype)
            self.cached_seq_len = seq_len_k
            self.cached_matrix = diff
        else:
            diff = self.cached_matrix

        self.bias_p.data = self.bias_p.data.clamp(min=self.eps)
        self.bias_a.data = self.bias_a.data.clamp(min=self.eps)
        bias = -self.bias_p * torch.log(1 + self.bias_a * diff)  # log kernel

        if seq_len_q != seq_len_k:
            assert seq_len_q == 1, "assumption sq == sk unless at inference time with cache in layer_past with sq == 1"
            if type(bias) != float:  # noqa: E721 (as in the authors' code)
                bias = bias[:, seq_len_k - 1, :].view(bias.shape[0], 1, bias.shape[2])

        return x + bias


def ported_attention(q, k, v, rpe):
    """Scores q k^T / sqrt(D), KERPLE's bias, the causal mask and the softmax, for q (B, H, Sq, D), k, v."""
    sq, sk = q.shape[-2], k.shape[-2]
    attention_scores = torch.matmul(q, k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    attention_scores = rpe(attention_scores)
    future = torch.ones(sk, sk, dtype=torch.bool).triu(1)[sk - sq :]
    return torch.softmax(attention_scores.masked_fill(future, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("impl,chunk", [("naive", 256), ("chunked", 4)])
@pytest.mark.parametrize("sq,sk", [(19, 19), (1, 17)])
def test_forward_and_backward_equal_the_authors_in_fp64(impl, chunk, sq, sk):
    """Prefill, and decoding one query at the last position (the authors' only decoding case)."""
    torch.manual_seed(0)
    b, h, d = 2, 4, 8
    ported = PortedKerpleLog(h)
    with torch.no_grad():
        ported.bias_a[0] = 0.001  # below the floor: clamped
    q = torch.randn(b, h, sq, d, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, h, sk, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    theirs = ported_attention(q, k, v, ported)  # clamps the parameters in place
    r1, r2 = ported.bias_p.view(h), ported.bias_a.view(h)
    assert r2[0] == 0.01
    ours = kerple_attention(q, k, v, r1, r2, impl=impl, chunk=chunk)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    grad = torch.randn_like(ours)
    inputs = (q, k, v, ported.bias_p, ported.bias_a)
    for a, e in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(theirs, inputs, grad)):
        torch.testing.assert_close(a, e, atol=1e-12, rtol=0)


def test_the_layer_keeps_r1_and_r2_above_the_authors_floor_with_a_straight_through_gradient():
    torch.manual_seed(0)
    layer = KERPLEAttention(d_model=16, n_heads=4, r1_init=3.0, r2_init=0.5).double()
    assert (layer.r1 > 0).all() and (layer.r1 < 3).all() and (layer.r2 < 0.5).all()
    with torch.no_grad():
        layer.r2[1] = -1.0  # below the floor (an optimizer step may take it there)
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    out = layer(x)
    with torch.no_grad():
        layer.r2[1] = 0.01
    torch.testing.assert_close(layer(x), out, atol=0, rtol=0)  # computed with r2 = 0.01
    layer.r2.data[1] = -1.0
    layer(x).sum().backward()
    assert layer.r2.grad[1] != 0  # the gradient still reaches it, as the authors' clamp-then-step does
    model = TransformerLM(ModelConfig(d_model=16, n_heads=4, n_layers=2, attention="kerple"))
    r1 = [block.attn.r1 for block in model.blocks]
    assert not torch.equal(*r1) and all(((r > 0) & (r < 2)).all() for r in r1)
    with pytest.raises(ValueError, match=r"KERPLEOptions\.r2_init = 0\.0; expected a finite positive number"):
        KERPLEOptions(r2_init=0.0)
