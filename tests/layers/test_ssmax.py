"""Scalable-Softmax: the paper's formula, the ASEntmax authors' implementation and layer with RoPE (ported below),
SDPA against the materialised reference (forward and backward, also through s), key counts within documents, bad
input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig
from tra_attn.layers import SSMaxAttention
from tra_attn.layers.cache import LayerCache
from tra_attn.ops.rows import key_counts
from tra_attn.ops.ssmax import ssmax_attention, ssmax_reference


def authors_ssmax(query_states, key_states, value_states, attn_scale_beta, log_position):
    """Ported from deep-spin/asentmax, synthetic/src/models/architectures/sparse_gemma.py at commit
    be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the "nakanishi" branch of ``_apply_length_scaling`` (all heads
    scaled) and the eager softmax attention after it, with Hugging Face's additive causal mask (0 or the dtype's
    minimum). Verbatim except that the softmax stays in the inputs' dtype (the original upcasts to fp32)."""
    q_len, k_len = query_states.shape[-2], key_states.shape[-2]
    log_position_slice = log_position[:, :, k_len - q_len : k_len, :]
    query_states = query_states * log_position_slice * attn_scale_beta
    query_states = query_states * (1 / query_states.shape[-1] ** 0.5)
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(k_len - q_len + 1)
    causal_mask = torch.zeros(q_len, k_len, dtype=attn_weights.dtype).masked_fill(
        future, torch.finfo(attn_weights.dtype).min
    )
    attn_weights = attn_weights + causal_mask
    attn_weights = F.softmax(attn_weights, dim=-1)
    return torch.matmul(attn_weights, value_states)


def rotate_half(x):
    """transformers' ``rotate_half`` (models/gemma2/modeling_gemma2.py, which sparse_gemma.py imports), verbatim."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """transformers' ``apply_rotary_pos_emb`` (the same module), verbatim."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def authors_rotary(x, position_ids, base=10000.0):
    """``GPTNeoXRotaryEmbedding2.forward`` (synthetic/src/models/architectures/gptx_rope.py, same commit) with
    transformers' default ``inv_freq``; verbatim except that the angles are in x's dtype (the original forces
    fp32) and the dynamic/attention-scaling branches (off for ``rope_type: default``) are left out."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(x.dtype) / dim))
    inv_freq_expanded = inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].to(x.dtype)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def authors_ssmax_layer(layer, hidden_states, decoding=False, max_seq_len=64):
    """``SparseGemma2Attention.forward`` of sparse_gemma.py (same commit) with ``apply_rotary`` and the "nakanishi"
    scaling on every head (``attn_scale_beta`` is the layer's s), then the eager softmax with Hugging Face's additive
    causal mask, on ``layer``'s weights. Verbatim except: the log table starts at log 1 (the paper's log n, as ours;
    theirs is log(n + 1), tested above), the softmax stays in the inputs' dtype, and with ``decoding`` the query is
    the last position against every (rotated) key, as their cache after a prefill."""
    bsz, q_len, _ = hidden_states.size()
    num_heads, head_dim = layer.n_heads, layer.head_dim
    query_states = layer.q_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    key_states = layer.k_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    value_states = layer.v_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    position_ids = torch.arange(q_len)[None].expand(bsz, -1)
    cos, sin = authors_rotary(value_states, position_ids)
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
    if decoding:
        query_states, q_len = query_states[..., -1:, :], 1
    log_position = torch.log(torch.arange(1, max_seq_len + 1, dtype=hidden_states.dtype)).reshape(1, 1, -1, 1)
    attn_output = authors_ssmax(query_states, key_states, value_states, layer.s.view(1, -1, 1, 1), log_position)
    return layer.o_proj(attn_output.transpose(1, 2).reshape(bsz, q_len, -1))


def paper_ssmax(q, k, v, s, n):
    """Nakanishi's definition, written out: weights n^(s z_j) / sum_l n^(s z_l) over the causal keys."""
    z = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    powers = torch.pow(n.to(z.dtype)[:, None, :, None], s[None, :, None, None] * z)
    sq, sk = q.shape[-2], k.shape[-2]
    powers = powers * torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
    return (powers / powers.sum(-1, keepdim=True)) @ v


def inputs(b=2, h=3, s=13, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(3))
    s_h = (0.5 + torch.rand(h, generator=gen, dtype=torch.float64)).requires_grad_()
    return q, k, v, s_h


def grads(out, tensors, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad((out * go).sum(), tensors)


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("sq", [13, 5, 1])
def test_sdpa_and_the_reference_equal_the_papers_formula_forward_and_backward(sq):
    q, k, v, s = inputs()
    qs = q[..., -sq:, :]
    n = key_counts(sq, 13 - sq, None, q.device)  # the last sq of 13 positions: n = 13 - sq + 1, ..., 13
    paper = paper_ssmax(qs, k, v, s, n)
    expected = grads(paper, (q, k, v, s))
    for path in (ssmax_attention, ssmax_reference):
        out = path(qs, k, v, s, n)
        assert max_error([out], [paper]) < 1e-14
        assert max_error(grads(out, (q, k, v, s)), expected) < 1e-13


def test_the_authors_implementation_with_their_offset_and_with_the_papers_length():
    """The authors' table is log(i + 2) = log(n + 1) ("avoids log(1) = 0"); ours is the paper's log(n). With their
    table shifted to log(n) the port is ours; with ours given n + 1 it is theirs."""
    q, k, v, s = inputs()
    beta = s[None, :, None, None]
    theirs = authors_ssmax(q, k, v, beta, torch.log(torch.arange(2, 15, dtype=torch.float64)).reshape(1, 1, -1, 1))
    papers = authors_ssmax(q, k, v, beta, torch.log(torch.arange(1, 14, dtype=torch.float64)).reshape(1, 1, -1, 1))
    n = key_counts(13, 0, None, q.device)
    for ours, port in ((ssmax_attention(q, k, v, s, n + 1), theirs), (ssmax_attention(q, k, v, s, n), papers)):
        assert max_error([ours], [port]) < 1e-14
        assert max_error(grads(ours, (q, k, v, s)), grads(port, (q, k, v, s))) < 1e-13


def test_key_counts_are_counted_within_documents():
    seg = torch.tensor([[-1, -1, 0, 0, 0, 1, 1], [2, 2, 2, 2, -1, -1, -1]], dtype=torch.int32)
    assert key_counts(7, 0, seg, "cpu").tolist() == [[1, 1, 1, 2, 3, 1, 2], [1, 2, 3, 4, 1, 1, 1]]
    assert key_counts(2, 0, seg, "cpu").tolist() == [[1, 2], [1, 1]]  # decoding: the last queries
    assert key_counts(3, 4, None, "cpu").tolist() == [[5, 6, 7]]  # after 4 cached keys


def test_a_document_in_a_packed_row_computes_what_it_computes_alone():
    q, k, v, s = inputs(b=1)
    seg = torch.tensor([[-1, -1] + [0] * 4 + [1] * 7], dtype=torch.int32)
    n = key_counts(13, 0, seg, q.device)
    for path in (ssmax_attention, ssmax_reference):
        packed = path(q, k, v, s, n, segment_ids=seg)
        for a, b in ((2, 6), (6, 13)):
            alone = path(*(t[..., a:b, :] for t in (q, k, v)), s, key_counts(b - a, 0, None, q.device))
            torch.testing.assert_close(packed[..., a:b, :], alone, atol=1e-14, rtol=0)


def trained_layer(**options):
    torch.manual_seed(0)
    layer = SSMaxAttention(d_model=24, n_heads=3, **options).double()
    with torch.no_grad():
        layer.s.uniform_(0.5, 1.5)
    return layer


def test_the_layer_equals_the_authors_layer_with_rope_forward_and_backward_in_fp64():
    layer = trained_layer()
    x = torch.randn(2, 13, 24, dtype=torch.float64, requires_grad=True)
    ours, theirs = layer(x), authors_ssmax_layer(layer, x)
    assert max_error([ours], [theirs]) < 1e-13
    tensors = (x, *layer.parameters())
    assert max_error(grads(ours, tensors), grads(theirs, tensors)) < 1e-12
    with torch.no_grad():  # a decoding step after a prefill: positions from the cache length
        cache = LayerCache()
        layer(x[:, :-1], cache=cache)
        assert max_error([layer(x[:, -1:], cache=cache)], [authors_ssmax_layer(layer, x, decoding=True)]) < 1e-13


def test_rope_false_is_the_layer_without_positions():
    layer = trained_layer(rope=False)
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    q, k, v = (layer.split_heads(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    out = ssmax_attention(q, k, v, layer.s, key_counts(9, 0, None, x.device))
    assert max_error([layer(x)], [layer.o_proj(out.transpose(1, 2).reshape(2, 9, 24))]) < 1e-15
    rotated = trained_layer()
    assert not torch.allclose(rotated(x), layer(x))
    with pytest.raises(ValueError, match=r"d_model = 6; expected an even head dimension .* SSMaxOptions\.rope"):
        SSMaxAttention(6, 2)
    assert SSMaxAttention(6, 2, rope=False)(torch.randn(1, 3, 6)).shape == (1, 3, 6)


def test_the_layer_learns_s_from_its_initial_value():
    layer = SSMaxAttention(d_model=16, n_heads=2, s_init=0.5).double()
    assert torch.equal(layer.s, torch.full((2,), 0.5, dtype=torch.float64))
    layer(torch.randn(2, 7, 16, dtype=torch.float64)).sum().backward()
    assert layer.s.grad.abs().min() > 0
    assert ModelConfig(attention="ssmax").attention_options.s_init == 1.0
    with pytest.raises(ValueError, match=r"SSMaxOptions\.s_init = 0\.0; expected a finite positive number"):
        ModelConfig(attention="ssmax", attention_options={"s_init": 0.0})
    assert ModelConfig(attention="ssmax").attention_options.rope is True
    with pytest.raises(ValueError, match=r"\['base'\] are not options of SSMaxAttention; its options: s_init, rope"):
        SSMaxAttention(16, 2, base=10.0)
