"""The ``fire`` kind against its authors' code: FIRE as the paper's listing writes it.

Ported below from mcleish7/arithmetic, commit 86022a57d38c0fde46444d62e8dcbebcc0af614c, a public port of the
listing in FIRE's paper (Li et al., ICLR 2024, arXiv 2310.04418): ``cramming/architectures/embeddings.py``
(class ``FIRE``: the MLP, c, the threshold L = |L_multiplier * init_L|, and its random positions in training)
and, from ``cramming/architectures/attention.py``, the lines of ``SeqFirstSelfAttention.attention`` that add the
bias (q k^T * norm_factor + fire) and ``TorchSoftmax`` (masked_fill with -10000, softmax).
"""

from __future__ import annotations

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import FIREAttention, FIREOptions
from tra_attn.ops.fire import fire_attention


class PortedFIRE(torch.nn.Module):
    """mcleish7/arithmetic's FIRE (the port: names and arithmetic as there, except that the positions take the
    parameters' dtype, theirs float32, which would round an fp64 comparison to fp32)."""

    def __init__(self, num_heads=12, mlp_width=32, init_c=0.1, init_L=512.0, eps=1e-6, max_length=0):
        super().__init__()
        self.max_length = max_length  # using random PE
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(1, mlp_width), torch.nn.ReLU(), torch.nn.Linear(mlp_width, num_heads)
        )
        self.c = torch.nn.Parameter(torch.tensor(init_c))
        self.init_L = torch.nn.Parameter(torch.tensor(init_L), requires_grad=False)
        self.L_multiplier = torch.nn.Parameter(torch.tensor(1.0))
        self.eps = eps

    def forward(self, seq_length, device):
        if (seq_length > self.max_length) or (not self.training):  # noqa: SIM108 (as in the authors' code)
            max_length = seq_length
        else:
            max_length = self.max_length
        positions = torch.sort(torch.randperm(max_length, dtype=self.c.dtype, device=device)[:seq_length]).values
        relative_distances = positions[:, None] - positions[None, :]
        threshold = torch.abs(self.L_multiplier * self.init_L)
        position_normalizer = torch.max(positions, threshold)[:, None]
        relative_distances = torch.log(torch.abs(self.c * relative_distances) + 1)
        position_normalizer = torch.log(torch.abs(self.c * position_normalizer) + 1)
        normalized_distances = relative_distances / (position_normalizer + self.eps)
        fire_bias = self.mlp(normalized_distances.unsqueeze(-1)).unsqueeze(0)
        fire_bias = fire_bias.permute(0, 3, 1, 2)
        return fire_bias


def ported_attention(q, k, v, fire, attention_mask):
    """The scores, bias and TorchSoftmax of mcleish7/arithmetic's attention, for q, k, v (B, H, S, D); the
    norm_factor buffer is computed in q's dtype (theirs in float32 before any ``.double()``)."""
    norm_factor = torch.tensor(q.shape[-1], dtype=q.dtype).rsqrt()
    attention_scores = torch.matmul(q, k.transpose(-1, -2)) * norm_factor
    attention_scores = attention_scores + fire
    attention_scores = attention_scores.masked_fill(attention_mask, -10000.0)
    return torch.softmax(attention_scores, dim=-1) @ v


def pair(h=3, width=5, init_L=6.0, max_length=0):
    """The ported FIRE in fp64 (threshold 6: some queries below it, some above) and our parameters from it."""
    torch.manual_seed(0)
    ported = PortedFIRE(h, width, init_c=0.3, init_L=init_L, max_length=max_length).double()
    mlp = (ported.mlp[0].weight, ported.mlp[0].bias, ported.mlp[2].weight, ported.mlp[2].bias)
    return ported, mlp


def inputs(b, h, sq, sk, d=8):
    q = torch.randn(b, h, sq, d, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, h, sk, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    return q, k, v


def check(ours, theirs, inputs):
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    grad = torch.randn_like(ours)
    for a, e in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(theirs, inputs, grad)):
        torch.testing.assert_close(a, e, atol=1e-12, rtol=0)


@pytest.mark.parametrize("impl,chunk", [("naive", 256), ("chunked", 4)])
@pytest.mark.parametrize("sq,sk", [(17, 17), (1, 15), (5, 11)])
def test_forward_and_backward_equal_the_authors_in_fp64(impl, chunk, sq, sk):
    """Gradients reach q, k, v, c, the threshold's multiplier and the MLP; decoding takes the last rows."""
    ported, mlp = pair()
    ported.eval()
    q, k, v = inputs(2, 3, sq, sk)
    threshold = torch.abs(ported.L_multiplier * ported.init_L)
    ours = fire_attention(q, k, v, ported.c, threshold, mlp, impl=impl, chunk=chunk)
    future = torch.ones(sk, sk, dtype=torch.bool).triu(1)[sk - sq :]
    theirs = ported_attention(q, k, v, ported(sk, "cpu")[..., sk - sq :, :], future)
    check(ours, theirs, (q, k, v, ported.c, ported.L_multiplier, *mlp))


def test_random_positions_equal_the_authors_random_fire():
    """In training the authors' FIRE draws sorted random positions of [0, max_length) itself; given the same
    positions (the same draw), ours computes the same attention."""
    ported, mlp = pair(max_length=40)
    ported.train()
    s = 13
    q, k, v = inputs(1, 3, s, s)
    torch.manual_seed(5)
    fire = ported(s, "cpu")
    torch.manual_seed(5)
    positions = torch.sort(torch.randperm(40, dtype=torch.float64)[:s]).values.long()[None]
    assert positions[0, -1] > 6 and not torch.equal(positions[0], torch.arange(s))
    threshold = torch.abs(ported.L_multiplier * ported.init_L)
    ours = fire_attention(q, k, v, ported.c, threshold, mlp, positions=positions, impl="chunked", chunk=5)
    future = torch.ones(s, s, dtype=torch.bool).triu(1)
    check(ours, ported_attention(q, k, v, fire, future), (q, k, v, ported.c, ported.L_multiplier, *mlp))


def test_the_layer_initialises_like_the_authors_and_refuses_bad_options():
    layer = FIREAttention(d_model=16, n_heads=2, mlp_width=7, c_init=0.2, threshold_init=64)
    assert layer.mlp_in.weight.shape == (7, 1) and layer.mlp_out.weight.shape == (2, 7)
    assert layer.c.item() == pytest.approx(0.2) and layer.threshold_multiplier.item() == 1.0
    model = TransformerLM(ModelConfig(d_model=16, n_heads=2, n_layers=1, attention="fire"))
    # the model's N(0, 0.02) init of linear layers leaves the MLP at PyTorch's default (the listing's) scale
    assert model.blocks[0].attn.mlp_in.weight.abs().max() > 0.1
    with pytest.raises(ValueError, match=r"FIREOptions\.mlp_width = 0; expected a positive integer"):
        FIREOptions(mlp_width=0)
    with pytest.raises(ValueError, match=r"FIREOptions\.threshold_init = -1\.0; expected a finite positive number"):
        FIREOptions(threshold_init=-1.0)
