"""The additive-bias kinds (t5, fire, kerple): the chunked path equals the materialised reference, forward and
backward in fp64, at odd lengths and chunk sizes, for decoding, packed or padded documents and given positions;
relative biases depend on position differences only; the chunked path has no graph break."""

from __future__ import annotations

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.ops import relative_bias
from tra_attn.ops.fire import fire_attention
from tra_attn.ops.kerple import kerple_attention
from tra_attn.ops.t5 import t5_attention

H = 3


def parameters(kind: str) -> list[torch.Tensor]:
    """Random fp64 parameters of ``kind``'s bias, requiring gradients."""
    gen = torch.Generator().manual_seed(1)
    shapes = {"t5": [(8, H)], "kerple": [(H,), (H,)], "fire": [(), (), (5, 1), (5,), (H, 5), (H,)]}[kind]
    params = [torch.rand(shape, generator=gen, dtype=torch.float64) + 0.1 for shape in shapes]
    if kind == "fire":
        params[1] = params[1] * 8  # threshold L about 5: some queries below it, some above
    return [p.requires_grad_() for p in params]


def attention(kind: str, q, k, v, params, **kwargs):
    if kind == "t5":
        return t5_attention(q, k, v, params[0], 8, 12, **kwargs)
    if kind == "kerple":
        return kerple_attention(q, k, v, *params, **kwargs)
    return fire_attention(q, k, v, params[0], params[1], tuple(params[2:]), **kwargs)


def qkv(b, sq, sk, d=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, H, sq, d, generator=gen, dtype=torch.float64).requires_grad_()
    k, v = (torch.randn(b, H, sk, d, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(2))
    return q, k, v


def outputs_and_grads(kind, q, k, v, params, **kwargs):
    out = attention(kind, q, k, v, params, **kwargs)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
    return [out, *torch.autograd.grad(out, [q, k, v, *params], grad)]


KINDS = ["t5", "fire", "kerple"]
SEGMENTS = torch.tensor([[-1, -1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "sq,sk,chunk,documents",
    [(13, 13, 1, False), (13, 13, 5, False), (4, 13, 3, False), (13, 13, 4, True), (3, 13, 2, True)],
)
def test_the_chunked_path_equals_the_reference_forward_and_backward(kind, sq, sk, chunk, documents):
    params = parameters(kind)
    q, k, v = qkv(2, sq, sk)
    kwargs = {"segment_ids": SEGMENTS} if documents else {}
    reference = outputs_and_grads(kind, q, k, v, params, impl="naive", **kwargs)
    chunked = outputs_and_grads(kind, q, k, v, params, impl="chunked", chunk=chunk, **kwargs)
    for name, a, e in zip(["out", "q", "k", "v", *range(len(params))], chunked, reference):
        torch.testing.assert_close(a, e, atol=1e-12, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
    with torch.no_grad():  # no checkpointing without gradients: the same numbers
        torch.testing.assert_close(attention(kind, q, k, v, params, impl="chunked", chunk=chunk, **kwargs), chunked[0])


@pytest.mark.parametrize("kind", KINDS)
def test_given_positions_are_used_and_only_differences_matter_except_for_fire(kind):
    """Positions 0, 2, 3, 7, ...: the bias reads them (T5 and KERPLE through p_i - p_j only, FIRE also through
    p_i in its normaliser max(L, p_i)); both paths agree on them."""
    params = parameters(kind)
    q, k, v = qkv(2, 11, 11)
    positions = torch.tensor([[0, 2, 3, 7, 8, 9, 15, 16, 20, 21, 30], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])
    given = attention(kind, q, k, v, params, positions=positions)
    torch.testing.assert_close(given, attention(kind, q, k, v, params, positions=positions, impl="chunked", chunk=3))
    plain = attention(kind, q, k, v, params)
    assert not torch.allclose(given[0], plain[0])
    shifted = attention(kind, q, k, v, params, positions=positions + 5)
    assert torch.allclose(shifted, given, atol=1e-12) == (kind != "fire")
    assert torch.allclose(given[1], plain[1], atol=1e-12) == (kind != "fire")  # 1..11 is 0..10 shifted by 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_chunked_path_has_no_graph_breaks(kind, monkeypatch):
    """A model forward longer than the chunk, with gradients (checkpointed blocks) and on packed documents."""
    monkeypatch.setattr(relative_bias, "CHUNK", 8)
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=16, n_layers=1, n_heads=2, attention=kind))
    ids = torch.randint(0, 13, (2, 21))
    seg = torch.tensor([[0] * 9 + [1] * 12, [-1] * 3 + [2] * 18])
    for kwargs in ({"labels": ids}, {"labels": ids, "segment_ids": seg}):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(ids, **kwargs)
        assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


def test_a_bad_impl_is_refused():
    q, k, v = qkv(1, 3, 3)
    with pytest.raises(ValueError, match=r"impl = 'fast'; expected one of \('auto', 'naive', 'chunked'\)"):
        attention("kerple", q, k, v, parameters("kerple"), impl="fast")
