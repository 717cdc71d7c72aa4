"""Gated attention: the authors' Qwen3 attention (ported below) in fp64, forward and gradients, for both gates; the
options that turn RoPE and QK-norm off; decoding through the cache; bad options."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import GatedAttention
from tra_attn.ops.causal import causal_sdpa
from tra_attn.ops.gated import gated_attention


class AuthorsRMSNorm(nn.Module):
    """``Qwen3RMSNorm`` of qiuzh20/gated_attention, modeling_qwen3.py at commit
    49645df63aafe9e680bc44a9c0ca280d4aefa8e9. Verbatim except that it computes in the input's dtype (the original
    casts to fp32), so that fp64 compares the math."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def authors_rope(position_ids, dim, base=10000.0):
    """``Qwen3RotaryEmbedding.forward`` (default rope type, scaling 1) of the same file and commit, with the default
    ``inv_freq`` of transformers' ROPE_INIT_FUNCTIONS; in fp64 (the original computes in fp32)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))
    inv_freq_expanded = inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].double()
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    """Rotates half the hidden dims of the input (same file and commit, verbatim)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Same file and commit, verbatim."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def authors_attention(layer: GatedAttention, hidden_states, q_norm, k_norm):
    """``Qwen3Attention.forward`` of the same file and commit (eager attention, no cache, no GQA: num_key_value_heads
    = num_heads), on ``layer``'s weights. Changes: their q projection, with the gate's rows after each head's q rows,
    is assembled from ``layer.q_proj`` and ``layer.gate_proj``; the softmax keeps fp64 (the original upcasts to
    fp32 and casts back); the causal mask is built here (their model passes it); attention dropout (0) is left out."""
    bsz, q_len, _ = hidden_states.size()
    num_heads = num_key_value_heads = layer.n_heads
    head_dim, num_key_value_groups = layer.head_dim, 1
    headwise = layer.options.gate == "headwise"
    d_model = hidden_states.shape[-1]
    q_weight = torch.cat(
        [layer.q_proj.weight.view(num_heads, head_dim, d_model), layer.gate_proj.weight.view(num_heads, -1, d_model)],
        dim=1,
    ).reshape(-1, d_model)

    query_states = F.linear(hidden_states, q_weight)
    key_states = layer.k_proj(hidden_states)
    value_states = layer.v_proj(hidden_states)

    if headwise:
        query_states = query_states.view(bsz, q_len, num_key_value_heads, -1)
        query_states, gate_score = torch.split(
            query_states, [head_dim * num_key_value_groups, num_key_value_groups], dim=-1
        )
        gate_score = gate_score.reshape(bsz, q_len, -1, 1)
        query_states = query_states.reshape(bsz, q_len, -1, head_dim).transpose(1, 2)
    else:
        query_states = query_states.view(bsz, q_len, num_key_value_heads, -1)
        query_states, gate_score = torch.split(
            query_states, [head_dim * num_key_value_groups, head_dim * num_key_value_groups], dim=-1
        )
        gate_score = gate_score.reshape(bsz, q_len, -1, head_dim)
        query_states = query_states.reshape(bsz, q_len, -1, head_dim).transpose(1, 2)

    key_states = key_states.view(bsz, q_len, -1, head_dim).transpose(1, 2)
    value_states = value_states.view(bsz, q_len, -1, head_dim).transpose(1, 2)

    query_states = q_norm(query_states)
    key_states = k_norm(key_states)

    cos, sin = authors_rope(torch.arange(q_len)[None].expand(bsz, -1), head_dim)
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(head_dim)
    causal_mask = torch.full((q_len, q_len), float("-inf"), dtype=attn_weights.dtype).triu(1)[None, None]
    attn_weights = attn_weights + causal_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    attn_output = attn_output * torch.sigmoid(gate_score)
    attn_output = attn_output.reshape(bsz, q_len, -1)
    return layer.o_proj(attn_output)


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_equals_the_authors_qwen3_attention_in_fp64_forward_and_backward(gate):
    torch.manual_seed(0)
    layer = GatedAttention(32, 4, gate=gate).double()
    with torch.no_grad():
        layer.q_norm.weight.uniform_(0.5, 1.5)
        layer.k_norm.weight.uniform_(0.5, 1.5)
    q_norm, k_norm = AuthorsRMSNorm(8, layer.norm_eps).double(), AuthorsRMSNorm(8, layer.norm_eps).double()
    q_norm.weight, k_norm.weight = layer.q_norm.weight, layer.k_norm.weight  # shared: gradients land on the layer's
    assert layer.gate_proj.weight.shape == ((32 if gate == "elementwise" else 4), 32)
    x = torch.randn(2, 13, 32, dtype=torch.float64, requires_grad=True)
    go = torch.randn(2, 13, 32, dtype=torch.float64)
    tensors = [x, *layer.parameters()]
    ours, theirs = layer(x), authors_attention(layer, x, q_norm, k_norm)
    assert (ours - theirs).abs().max().item() < 1e-13
    for a, b in zip(torch.autograd.grad((ours * go).sum(), tensors), torch.autograd.grad((theirs * go).sum(), tensors)):
        assert (a - b).abs().max().item() < 1e-12


def test_without_rope_and_qk_norm_it_is_softmax_attention_times_the_gate():
    torch.manual_seed(0)
    layer = GatedAttention(32, 4, rope=False, qk_norm=False).double()
    assert not hasattr(layer, "q_norm")
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    q, k, v = (layer.split_heads(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    out = causal_sdpa(q, k, v) * torch.sigmoid(layer.split_heads(layer.gate_proj(x)))
    torch.testing.assert_close(layer(x), layer.o_proj(out.transpose(1, 2).reshape(2, 9, 32)), atol=1e-14, rtol=0)
    options = ModelConfig(attention="gated").attention_options
    assert (options.gate, options.rope, options.qk_norm) == ("elementwise", True, True)


def test_logit_dropout_runs_the_materialised_softmax_and_keeps_the_gate():
    gen = torch.Generator().manual_seed(0)
    q, k, v, g = (torch.randn(2, 3, 7, 8, generator=gen, dtype=torch.float64) for _ in range(4))
    torch.manual_seed(1)
    out = gated_attention(q, k, v, g, logit_dropout=0.3)
    torch.manual_seed(1)
    torch.testing.assert_close(out, causal_sdpa(q, k, v, logit_dropout=0.3) * torch.sigmoid(g), atol=0, rtol=0)


@pytest.mark.parametrize("gate", ["elementwise", "headwise"])
def test_decoding_through_the_cache_equals_the_full_forward(gate):
    options = {"gate": gate}
    config = ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, attention="gated", attention_options=options)
    model = TransformerLM(config).double()
    ids = torch.randint(0, 13, (2, 17), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache()
    with torch.no_grad():
        parts = [model(ids[:, a:b], cache=cache) for a, b in ((0, 6), (6, 7), (7, 17))]
        torch.testing.assert_close(torch.cat(parts, 1), model(ids), atol=1e-12, rtol=1e-12)


def test_bad_options_get_clear_errors():
    with pytest.raises(ValueError, match=r"GatedOptions\.gate = 'scalar'; expected one of \('elementwise', 'head"):
        GatedAttention(32, 4, gate="scalar")
    with pytest.raises(ValueError, match=r"expected an even head dimension .* GatedOptions\.rope = True"):
        GatedAttention(12, 4)
    GatedAttention(12, 4, rope=False)
