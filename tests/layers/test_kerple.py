"""The ``kerple`` kind against its authors' code: KERPLE-log as chijames/KERPLE implements it.

Ported below from chijames/KERPLE, commit 25be3d712e96a3353b374f1f8e36b97d86f97ffa: ``megatron/mpu/layers.py``
(class ``ParallelKerpleLog``: parameters bias_p = r1 ~ U(0, 2) and bias_a = r2 ~ U(0, 1) per head, clamped in
place to eps = 0.01, and its forward with the cached distance matrix and the decoding branch), without
model parallelism and with the parameters on the CPU; and from ``megatron/model/transformer.py``
(``ParallelSelfAttention.attention``) the scores q k^T / norm_factor passed through the bias, then the causal
mask and the softmax. ``megatron/model/gpt2_model.py`` builds one ``ParallelKerpleLog`` and passes it to every layer
(``rpe=rpe_emb``): the model's layers share it, each call clamping bias_p and bias_a in place before using them.
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


def test_a_model_shares_one_pair_across_its_layers_as_the_authors_one_module_in_fp64():
    """The authors' model: one ParallelKerpleLog, called by every layer (each call clamps its parameters in place).
    Ours: the layers of a two-layer model (the same r1, r2), layer 1's queries read layer 0's output; the outputs and
    every gradient (r1's and r2's: the sum of both layers') equal the authors', and r2 is clamped in place in both."""
    torch.manual_seed(0)
    b, h, d, s = 2, 4, 8, 13
    model = TransformerLM(ModelConfig(d_model=h * d, n_heads=h, n_layers=2, attention="kerple")).double()
    first, second = (block.attn for block in model.blocks)
    assert first.r1 is second.r1 and first.r2 is second.r2
    ported = PortedKerpleLog(h)
    with torch.no_grad():
        ported.bias_a[0] = 0.001  # below the floor: both clamp it at their first forward
        first.r1.copy_(ported.bias_p.view(h))
        first.r2.copy_(ported.bias_a.view(h))
    inputs = [torch.randn(b, h, s, d, dtype=torch.float64, requires_grad=True) for _ in range(6)]
    q0, k0, v0, q1, k1, v1 = inputs
    theirs = ported_attention(q1 + ported_attention(q0, k0, v0, ported), k1, v1, ported)
    ours = second.attend(None, q1 + first.attend(None, q0, k0, v0, None), k1, v1, None)
    assert ported.bias_a.view(h)[0] == 0.01 and first.r2[0] == 0.01
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    grad = torch.randn_like(ours)
    theirs_grads = torch.autograd.grad(theirs, [*inputs, ported.bias_p, ported.bias_a], grad)
    ours_grads = torch.autograd.grad(ours, [*inputs, first.r1, first.r2], grad)
    for a, e in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, e.view(a.shape), atol=1e-12, rtol=0)


def kerple_model(**options) -> TransformerLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=11, d_model=16, n_heads=4, n_layers=2, attention="kerple", attention_options=options
    )
    return TransformerLM(config).double()


def test_one_parameter_for_both_layers_whose_gradient_is_the_sum_of_theirs():
    """shared=True: one r1 and one r2 (one tensor in every layer, counted and optimized once, saved once); its gradient
    is the sum of the gradients that the layers' own pairs get in the former kind (shared=False, same values)."""
    shared, own = kerple_model(), kerple_model(shared=False)
    assert [n for n in shared.state_dict() if n.endswith((".r1", ".r2"))] == ["blocks.0.attn.r1", "blocks.0.attn.r2"]
    assert shared.num_parameters() == own.num_parameters() - 2 * 4
    names = [name for name, _ in shared.named_parameters()]
    assert "blocks.0.attn.r1" in names and "blocks.1.attn.r1" not in names
    own.load_state_dict(shared.state_dict(), strict=False)  # every weight, and layer 1's pair below
    for block in own.blocks:
        block.attn.r1.data.copy_(shared.blocks[0].attn.r1)
        block.attn.r2.data.copy_(shared.blocks[0].attn.r2)
    ids = torch.randint(0, 11, (2, 12))
    shared(ids, labels=ids).sum().backward()
    own(ids, labels=ids).sum().backward()
    for name in ("r1", "r2"):
        both = sum(getattr(block.attn, name).grad for block in own.blocks)
        torch.testing.assert_close(getattr(shared.blocks[1].attn, name).grad, both, atol=1e-12, rtol=0)
        assert not torch.equal(getattr(own.blocks[0].attn, name).grad, both)


def test_a_step_below_the_floor_is_clamped_in_place_at_the_next_forward_as_the_authors_do():
    """clamp="in_place": an optimizer step that takes r2 below eps leaves it there until the next forward, which sets
    the stored value to eps (as the authors' forward) before using it, and it stays there; the former
    straight-through floor computes the same forward but leaves the stored value below eps."""
    ported = PortedKerpleLog(4)
    for clamp in ("in_place", "straight_through"):
        model = kerple_model(clamp=clamp)
        r2 = model.blocks[0].attn.r2
        with torch.no_grad():
            ported.bias_a.copy_(r2.view(4, 1, 1))
        for p in (r2, ported.bias_a):
            p.grad = torch.zeros_like(p)
            p.grad.view(-1)[1] = 10.0
            torch.optim.SGD([p], lr=1.0).step()  # r2[1] - 10 < 0.01
            assert p.view(-1)[1] < 0
        ported(torch.zeros(1, 4, 3, 3, dtype=torch.float64))
        assert ported.bias_a.view(-1)[1] == 0.01  # the authors' forward clamped it in place
        ids = torch.randint(0, 11, (2, 7))
        out = model(ids)
        at_floor = kerple_model(clamp=clamp)
        at_floor.load_state_dict(model.state_dict())
        with torch.no_grad():
            at_floor.blocks[0].attn.r2.clamp_(min=0.01)
        assert torch.equal(out, at_floor(ids))  # either way the forward uses max(r2, eps)
        if clamp == "in_place":
            assert r2[1] == 0.01 and torch.equal(r2, ported.bias_a.view(-1))
            model(ids, labels=ids).sum().backward()
            assert r2[1] == 0.01 and r2.grad[1] != 0  # after the next forward and backward too
        else:
            assert r2[1] < 0  # the stored value is never changed
            model(ids, labels=ids).sum().backward()
            assert r2.grad[1] != 0  # the gradient passes straight through to it


def test_the_train_step_hook_clamps_the_stored_values_before_the_forwards():
    """So that a model whose forwards see gathered copies (FSDP) still starts each step from eps."""
    model = kerple_model()
    r1 = model.blocks[1].attn.r1
    r1.data[2] = -3.0
    model.set_train_step(5)
    assert r1[2] == 0.01
    former = kerple_model(clamp="straight_through")
    former.blocks[0].attn.r1.data[2] = -3.0
    former.set_train_step(5)
    assert former.blocks[0].attn.r1[2] == -3.0


def test_a_layer_built_alone_has_its_own_pair_and_the_options_check():
    torch.manual_seed(0)
    layer = KERPLEAttention(d_model=16, n_heads=4, r1_init=3.0, r2_init=0.5).double()
    assert (layer.r1 > 0).all() and (layer.r1 < 3).all() and (layer.r2 < 0.5).all()
    with torch.no_grad():
        layer.r2[1] = -1.0
    layer(torch.randn(1, 9, 16, dtype=torch.float64)).sum().backward()  # its own parameters, clamped in place
    assert layer.r2[1] == 0.01 and layer.r2.grad is not None
    assert KERPLEOptions() == KERPLEOptions(shared=True, clamp="in_place")
    assert ModelConfig(attention="kerple").attention_options == KERPLEOptions()
    former = TransformerLM(
        ModelConfig(
            d_model=16,
            n_heads=4,
            n_layers=2,
            attention="kerple",
            attention_options={"shared": False, "clamp": "straight_through"},
        )
    )
    r1 = [block.attn.r1 for block in former.blocks]
    assert not torch.equal(*r1) and all(((r > 0) & (r < 2)).all() for r in r1)
    with pytest.raises(ValueError, match=r"KERPLEOptions\.r2_init = 0\.0; expected a finite positive number"):
        KERPLEOptions(r2_init=0.0)
    with pytest.raises(
        ValueError, match=r"KERPLEOptions\.clamp = 'no'; expected one of \('in_place', 'straight_through'\)"
    ):
        KERPLEOptions(clamp="no")
    with pytest.raises(ValueError, match=r"KERPLEOptions\.shared = 1; expected true or false"):
        KERPLEOptions(shared=1)
