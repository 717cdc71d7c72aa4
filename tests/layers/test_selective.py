"""Selective attention: x-transformers' reference (ported below) in fp64, forward and gradients; F written out by hand;
decoding through the cache continues F exactly; documents of a packed or padded batch; logit dropout."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import SelectiveAttention
from tra_attn.ops.masks import masked_softmax
from tra_attn.ops.rows import visible_keys
from tra_attn.ops.selective import selective_attention

SEG = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


def default(val, d):
    return val if val is not None else d


def authors_selective_attn(sim, sim_head_gate=None, no_mask_sos=True):
    """Ported from lucidrains/x-transformers, x_transformers/attend.py at commit
    9252ed7838021ee61e6c5be0930b3a9a88efdf06 (``selective_attn``; the paper, arXiv 2410.02703, has no official
    code). Verbatim except that einops' ``rearrange(gate, 'b i j -> b 1 i j')`` is ``gate[:, None]``."""
    i, j, device = *sim.shape[-2:], sim.device
    sim_head_gate = default(sim_head_gate, sim[:, 0])

    gate = F.relu(sim_head_gate)  # only positive

    if no_mask_sos:
        gate = gate.clone()
        gate[..., -i] = 0.0

    eye = torch.eye(i, device=device)

    if j > i:
        eye = F.pad(eye, (j - i, 0), value=1.0)

    gate = (1.0 - eye) * gate
    gate = F.pad(gate, (0, 0, 1, -1), value=0.0)  # only allow for masking the future
    gate = gate.cumsum(dim=-2)

    return sim - gate[:, None]


def authors_attend(q, k, v):
    """The lines of ``Attend.forward`` (same file and commit) that a causal, selective, softmax attention runs: scaled
    scores, the causal mask filled with -finfo.max (``create_causal_mask``), ``selective_attn``, softmax, values.
    The softmax keeps fp64 (theirs: ``F.softmax(..., dtype=torch.float32)`` without qk-norm)."""
    scale = q.shape[-1] ** -0.5
    sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * scale
    i, j = sim.shape[-2:]
    mask_value = -torch.finfo(sim.dtype).max
    causal_mask = torch.ones((i, j), device=q.device, dtype=torch.bool).triu(j - i + 1)
    sim = sim.masked_fill(causal_mask, mask_value)
    sim = authors_selective_attn(sim)
    attn = F.softmax(sim, dim=-1)
    return torch.einsum("b h i j, b h j d -> b h i d", attn, v)


def inputs(b=2, h=3, s=13, d=8, seed=0, spread=2.0):
    gen = torch.Generator().manual_seed(seed)
    q = spread * torch.randn(b, h, s, d, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(2))
    return [t.requires_grad_() for t in (q, k, v)]


def grads(out, tensors, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.autograd.grad((out * go).sum(), tensors)


@pytest.mark.parametrize("s", [13, 2, 1])
def test_equals_x_transformers_in_fp64_forward_and_backward(s):
    tensors = inputs(s=s)
    ours, _ = selective_attention(*tensors)
    theirs = authors_attend(*tensors)
    assert (ours - theirs).abs().max().item() < 1e-13
    for a, b in zip(grads(ours, tensors), grads(theirs, tensors)):
        assert (a - b).abs().max().item() < 1e-12


def test_the_masking_is_head_0s_positive_scores_summed_over_the_queries_between():
    """F_ij = sum_{j < k < i} relu(C^0_kj) for j > 0, F_i0 = 0; every head's logits lose F (written out here)."""
    q, k, v = (t.detach() for t in inputs(s=7))
    c = (q @ k.transpose(-1, -2)) / 8**0.5
    f = torch.zeros(2, 7, 7, dtype=torch.float64)
    for i in range(7):
        for j in range(1, i + 1):
            f[:, i, j] = sum((F.relu(c[:, 0, kk, j]) for kk in range(j + 1, i)), torch.zeros(2, dtype=torch.float64))
    expected = masked_softmax(c - f[:, None], visible_keys(7, 7, None, None)) @ v
    out, added = selective_attention(q, k, v)
    torch.testing.assert_close(out, expected, atol=1e-14, rtol=0)
    s = torch.where(torch.ones(7, 7, dtype=torch.bool).tril(-1), F.relu(c[:, 0]), 0.0)
    s[..., 0] = 0
    torch.testing.assert_close(added, s.sum(-2), atol=1e-14, rtol=0)  # what a cache accumulates per key


def test_chunks_with_the_accumulated_selections_equal_the_full_forward():
    q, k, v = (t.detach() for t in inputs())
    full, total = selective_attention(q, k, v)
    selected, parts = torch.zeros(2, 0, dtype=torch.float64), []
    for a, b in ((0, 4), (4, 5), (5, 13)):
        selected = torch.cat([selected, torch.zeros(2, b - a, dtype=torch.float64)], -1)
        out, added = selective_attention(q[..., a:b, :], k[..., :b, :], v[..., :b, :], selected)
        selected = selected + added
        parts.append(out)
    torch.testing.assert_close(torch.cat(parts, -2), full, atol=1e-14, rtol=0)
    torch.testing.assert_close(selected, total, atol=1e-14, rtol=0)


def test_each_document_of_a_packed_or_padded_batch_computes_as_alone():
    tensors = inputs()
    out, _ = selective_attention(*tensors, segment_ids=SEG)
    for row, start, stop in ((0, 2, 5), (0, 5, 13), (1, 0, 9)):
        alone = authors_attend(*(t[row : row + 1, :, start:stop] for t in tensors))
        assert (out[row : row + 1, :, start:stop] - alone).abs().max().item() < 1e-13


def test_logit_dropout_drops_the_masked_logits():
    q, k, v = (t.detach() for t in inputs(s=9))
    torch.manual_seed(2)
    out, _ = selective_attention(q, k, v, logit_dropout=0.4)
    c = (q @ k.transpose(-1, -2)) / 8**0.5
    plain, _ = selective_attention(q, k, v)
    visible = visible_keys(9, 9, None, None)
    s = torch.where(visible & ~torch.eye(9, dtype=torch.bool), F.relu(c[:, 0]), 0.0)
    s[..., 0] = 0
    logits = c - F.pad(s, (0, 0, 1, 0))[..., :-1, :].cumsum(-2)[:, None]
    torch.manual_seed(2)
    dropped = F.dropout(torch.where(visible, logits, 0.0), 0.4, training=True)
    torch.testing.assert_close(out, masked_softmax(dropped, visible) @ v, atol=1e-14, rtol=0)
    torch.testing.assert_close(plain, masked_softmax(logits, visible) @ v, atol=1e-14, rtol=0)


def test_the_layer_has_no_parameters_of_its_own_and_decodes_through_the_cache_like_the_full_forward():
    layer = SelectiveAttention(32, 4)
    assert {name for name, _ in layer.named_parameters()} == {
        "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "o_proj.bias"
    }  # fmt: skip
    config = ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, attention="selective")
    model = TransformerLM(config).double()
    ids = torch.randint(0, 13, (2, 17), generator=torch.Generator().manual_seed(0))
    cache = model.new_cache()
    with torch.no_grad():
        parts = [model(ids[:, a:b], cache=cache) for a, b in ((0, 6), (6, 7), (7, 8), (8, 17))]
        torch.testing.assert_close(torch.cat(parts, 1), model(ids), atol=1e-12, rtol=1e-12)
    assert cache[0].extras["selected"].shape == (2, 1, 17)
