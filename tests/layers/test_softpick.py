"""Softpick attention: the authors' reference (ported below) in fp64, forward and gradients; the chunked path against
the materialised one (odd lengths, blocks, documents); rows that drop every key; logit dropout; the layer's RoPE."""

from __future__ import annotations

from typing import Optional

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import SoftpickAttention
from tra_attn.ops.rope import apply_rope, rope_angles
from tra_attn.ops.rows import visible_keys
from tra_attn.ops.softpick import softpick_attention, softpick_chunked, softpick_naive, softpick_weights

SEG = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


def authors_softpick(x, dim=-1, eps=1e-8):
    """Ported from zaydzuhri/softpick-attention, naive_softpick_attn.py at commit
    c97f4dc5f9fcec2e8afc2932db2cba6d7d7e5465 (``softpick``): verbatim."""
    # softpick function: relu(exp(x)-1) / sum(abs(exp(x)-1))
    # numerically stable version
    x_m = torch.max(x, dim=dim, keepdim=True).values
    x_m_e_m = torch.exp(-x_m)
    x_e_1 = torch.exp(x - x_m) - x_m_e_m
    r_x_e_1 = F.relu(x_e_1)
    a_x_e_1 = torch.where(x.isfinite(), torch.abs(x_e_1), 0)
    return r_x_e_1 / (torch.sum(a_x_e_1, dim=dim, keepdim=True) + eps)


def authors_naive_softpick_attn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: Optional[float] = None,  # noqa: UP045 (their signature)
    eps: float = 1e-8,
) -> torch.Tensor:
    """``naive_softpick_attn`` of the same file and commit, head-first (B, H, S, D). Verbatim except: the scores keep
    the inputs' dtype (the original casts them to fp32, ``wei.float()``), so that fp64 compares the math; ``eps`` is
    passed to ``softpick`` (their 1e-8 by default; their kernel adds 1e-6); the (unused) ``cu_seqlens`` and the
    layout switch are left out; it returns the output only."""
    head_dim = q.shape[-1]
    if scale is None:
        scale = 1.0 / (head_dim**0.5)
    q_len = q.shape[-2]
    k_len = k.shape[-2]
    mask = torch.tril(torch.ones(k_len, k_len, device=q.device))
    wei = torch.matmul(q, k.transpose(2, 3))  # shape: (batch_size, num_heads, q_len, k_len)
    wei = wei * scale
    wei = wei.masked_fill(mask[k_len - q_len : k_len, :k_len] == 0, float("-inf"))
    wei = authors_softpick(wei, dim=-1, eps=eps).to(q.dtype)
    o = torch.matmul(wei, v)  # shape: (batch_size, num_heads, q_len, head_dim)
    return o


def inputs(b=2, h=3, sq=13, sk=13, d=8, seed=0, dtype=torch.float64, spread=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = spread * torch.randn(b, h, sq, d, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64) for _ in range(2))
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def grads(out, tensors, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
    return torch.autograd.grad((out * go).sum(), tensors)


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("impl", ["naive", "chunked"])
@pytest.mark.parametrize("eps", [1e-8, 1e-6, 0.1])
@pytest.mark.parametrize("sq", [13, 5, 1])
def test_equals_the_authors_reference_in_fp64_forward_and_backward(impl, eps, sq):
    """Prefill (Sq = Sk = 13) and the last Sq queries of a cache; a large eps shows the gradient through the row max."""
    tensors = inputs(sq=sq, spread=2.0)
    ours = softpick_attention(*tensors, eps=eps, impl=impl)
    theirs = authors_naive_softpick_attn(*tensors, eps=eps)
    assert (ours - theirs).abs().max().item() < 1e-13
    assert max_error(grads(ours, tensors), grads(theirs, tensors)) < 1e-12


@pytest.mark.parametrize("block", [1, 4, 64])
@pytest.mark.parametrize("segment_ids", [None, SEG], ids=["plain", "documents"])
def test_the_chunked_path_equals_the_materialised_one(block, segment_ids):
    tensors = inputs()
    naive = softpick_naive(*tensors, segment_ids=segment_ids)
    chunked = softpick_chunked(*tensors, segment_ids=segment_ids, block_size=block)
    assert (naive - chunked).abs().max().item() < 1e-14
    assert max_error(grads(naive, tensors), grads(chunked, tensors)) < 1e-13


def test_each_document_of_a_packed_or_padded_batch_computes_as_alone():
    tensors = inputs()
    out = softpick_chunked(*tensors, segment_ids=SEG)
    for row, start, stop in ((0, 2, 5), (0, 5, 13), (1, 0, 9)):
        alone = authors_naive_softpick_attn(*(t[row : row + 1, :, start:stop] for t in tensors), eps=1e-6)
        assert (out[row : row + 1, :, start:stop] - alone).abs().max().item() < 1e-14


def test_dropped_keys_weigh_exactly_zero_and_still_count_in_the_denominator():
    s = torch.tensor([[0.5, -1.0, 0.0, 2.0]], dtype=torch.float64)
    weights = softpick_weights(s, torch.ones(1, 4, dtype=torch.bool), eps=0.0)
    e = s.exp() - 1
    assert torch.equal(weights[0, 1:3], torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(weights, F.relu(e) / e.abs().sum(), atol=1e-15, rtol=0)
    assert weights.sum().item() < 1  # no longer sums to one


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("impl", ["naive", "chunked"])
@pytest.mark.parametrize("size", [1.0, 300.0])
def test_a_query_that_drops_every_key_outputs_exact_zeros_without_nan(dtype, impl, size):
    """Every score of queries 3 and 7 is negative (300: e^-s would overflow fp32 without the floored max)."""
    q, k, v = (t.detach() for t in inputs(dtype=dtype))
    k = k.abs() + 0.1
    q = q.clone()
    q[:, :, [3, 7]] = -size * (q[:, :, [3, 7]].abs() + 0.1)
    tensors = [t.requires_grad_() for t in (q, k, v)]
    out = softpick_attention(*tensors, impl=impl)
    assert torch.equal(out[:, :, [3, 7]], torch.zeros_like(out[:, :, [3, 7]]))
    assert out.abs().sum() > 0
    gq, gk, gv = grads(out, tensors)
    assert all(torch.isfinite(g).all() for g in (gq, gk, gv))
    assert torch.equal(gq[:, :, [3, 7]], torch.zeros_like(gq[:, :, [3, 7]]))


def test_logit_dropout_drops_the_scores_and_a_dropped_key_adds_nothing():
    q, k, v = inputs()
    torch.manual_seed(3)
    out = softpick_attention(q, k, v, logit_dropout=0.5)
    torch.manual_seed(3)
    visible = visible_keys(13, 13, None, q.device)
    s = F.dropout(torch.where(visible, (q @ k.transpose(-1, -2)) / 8**0.5, 0.0), 0.5, training=True)
    e = torch.where(visible, s.exp() - 1, 0.0)  # a dropped score (0) gives e^0 - 1 = 0
    eps = 1e-6 * torch.where(visible, s, 0).amax(-1, keepdim=True).clamp_min(0).exp()  # eps on the rescaled sum
    expected = (F.relu(e) / (e.abs().sum(-1, keepdim=True) + eps)) @ v
    assert (s == 0).any(-1).all()  # every row has a dropped (or a masked) key
    torch.testing.assert_close(out, expected, atol=1e-14, rtol=0)
    grads(out, [q, k, v])


def test_the_layer_rotates_q_and_k_by_rope_by_default_and_runs_without_it():
    torch.manual_seed(0)
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    for rope in (True, False):
        layer = SoftpickAttention(32, 4, rope=rope).double()
        q, k, v = (layer.split_heads(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
        if rope:
            cos, sin = rope_angles(torch.arange(11), 8)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        expected = layer.o_proj(authors_naive_softpick_attn(q, k, v, eps=1e-6).transpose(1, 2).reshape(2, 11, 32))
        torch.testing.assert_close(layer(x), expected, atol=1e-13, rtol=0)
    assert ModelConfig(attention="softpick").attention_options.rope


def test_a_model_trains_with_logit_dropout_and_decodes_through_the_cache_like_the_full_forward():
    config = ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, attention="softpick", attention_dropout=0.1)
    model = TransformerLM(config).double()
    ids = torch.randint(0, 13, (2, 17), generator=torch.Generator().manual_seed(0))
    model.train()
    model(ids).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    cache = model.new_cache()
    parts = [model(ids[:, a:b], cache=cache) for a, b in ((0, 6), (6, 7), (7, 17))]
    torch.testing.assert_close(torch.cat(parts, 1), model(ids), atol=1e-12, rtol=1e-12)


def test_bad_options_and_input_get_clear_errors():
    with pytest.raises(ValueError, match=r"SoftpickOptions\.eps = 0\.0; expected a finite positive number"):
        SoftpickAttention(32, 4, eps=0.0)
    with pytest.raises(ValueError, match=r"SoftpickOptions\.impl = 'flash'; expected one of"):
        SoftpickAttention(32, 4, impl="flash")
    with pytest.raises(ValueError, match=r"expected an even head dimension .* SoftpickOptions\.rope = True"):
        SoftpickAttention(12, 4)
    SoftpickAttention(12, 4, rope=False)
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"softpick_attention: impl = 'fast'; expected one of"):
        softpick_attention(q, k, v, impl="fast")
    with pytest.raises(ValueError, match=r"impl = 'chunked' with logit_dropout = 0\.1; expected impl 'naive'"):
        softpick_attention(q, k, v, impl="chunked", logit_dropout=0.1)
