"""Stick-breaking attention: the authors' reference and model layer (ported below), the chunked path against the
materialised one (forward and backward, odd lengths, documents), log-space numerics in fp32, rows with one or no key,
bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig
from tra_attn.layers import StickBreakingAttention
from tra_attn.layers.cache import LayerCache
from tra_attn.ops.stickbreaking import stickbreaking_attention, stickbreaking_chunked, stickbreaking_naive

SEG = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


def authors_stickbreaking(q, k, v, mask, cum_weight):
    """Ported from shawntan/stickbreaking-attention, stickbreaking_attention/sb_ref.py at commit
    3147a3841b025a31d271fc8f873120ff6fa0461b: the authors' reference, (att @ v, 1 - att.sum(-1)). Verbatim except
    that the logits keep the inputs' dtype (the original casts them to fp32), so that fp64 compares the math."""
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    original_dtype = logits.dtype
    log_z = F.logsigmoid(logits).masked_fill(mask, -1e5).to(original_dtype)
    log_beta = F.logsigmoid(-logits).masked_fill(mask, 0).to(original_dtype)
    re_cum_log_beta = torch.einsum("bhij,jk->bhik", log_beta, cum_weight.to(log_beta))
    log_att = log_z + re_cum_log_beta
    att = log_att.exp()
    return att @ v, 1 - att.sum(dim=-1)


def authors_ref_fwd(q, k, v, attend_current, remainder):
    """``ref_fwd`` of tests/test_attn.py in the same repository and commit (on the CPU): the masks of the diagonal
    (``attend_current``) and, with ``remainder``, the leftover stick on the query's own value, o + rem * v."""
    length = q.shape[-2]
    cm = torch.ones(length, length).tril(-1).to(q)
    mask = torch.ones(length, length).triu(1 if attend_current else 0).bool()
    o, rem = authors_stickbreaking(q, k, v, mask, cm)
    return o + rem[..., None] * v if remainder else o, rem


def authors_decoding(q, k, v, scale=None):
    """Ported from deep-spin/asentmax, synthetic/src/attention/stickbreaking/sb_attn_layer.py at commit
    be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d (Mayank Mishra's decoding step of the authors' model, which the
    ASEntmax authors use as their stick-breaking baseline): one query, the last key (its own) excluded. Verbatim
    except that q and k keep their dtype (the original casts them to fp32)."""
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    assert q.size(2) == 1
    original_dtype = q.dtype
    logits = q @ k[..., :-1, :].transpose(-1, -2) * scale
    log_z = F.logsigmoid(logits).to(original_dtype)
    log_beta = F.logsigmoid(-logits).to(original_dtype)
    re_cum_log_beta = log_beta.flip(-1).cumsum(dim=-1).flip(-1) - log_beta
    log_att = log_z + re_cum_log_beta
    att = log_att.exp()
    v = v[..., :-1, :]
    out = torch.einsum("bhij,bhjd->bhid", att, v)
    return out, 1 - att.sum(dim=-1)


def authors_sb_layer(layer, hidden_states, decoding=False):
    """Ported from IBM/dolomite-engine, lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/
    stickbreaking_attention.py at commit d0ee186128e8b8dfff7c1f90390398fdabc75be7: ``SBAttention.forward`` (the
    model layer of the stick-breaking authors' paper) on ``layer``'s weights: ``head_bias`` (H, D) and ``norm``
    (``torch.nn.GroupNorm(H, d_model)``) are the layer's, ``c_proj`` is its ``o_proj``. Verbatim except: q, k, v come
    from the layer's three projections (theirs: one fused ``c_attn``); ``sb_attn`` (their Triton kernel) is the
    authors' reference ``authors_ref_fwd`` above (sb_attn's default attend_current=False, no remainder on v); and
    with ``decoding`` the query is the last position only against all keys (their decoding branch, q_len != k_len;
    their cache update is commented out, so the keys are given whole)."""
    bsz_, s, _ = hidden_states.shape
    query, key, value = (layer.split_heads(p(hidden_states)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    if decoding:
        query = query[..., -1:, :]
    length_ = query.size(2)
    if query.size(2) == key.size(2):
        hidden_states, rem = authors_ref_fwd(query, key, value, attend_current=False, remainder=False)
    else:
        hidden_states, rem = authors_decoding(q=query, k=key, v=value)
    hidden_states = hidden_states + rem[..., None] * layer.head_bias[None, :, None, :]
    hidden_states = hidden_states.permute(0, 2, 1, 3)
    hidden_states = hidden_states.reshape(bsz_ * length_, layer.n_heads * layer.head_dim)  # theirs: view
    hidden_states = layer.norm(hidden_states)
    hidden_states = hidden_states.view(bsz_, length_, layer.n_heads * layer.head_dim)
    return layer.o_proj(hidden_states)


def inputs(b=2, h=3, s=13, d=8, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=gen, dtype=dtype).requires_grad_() for _ in range(3)]


def grads(out, rem, tensors, seed=1):
    gen = torch.Generator().manual_seed(seed)
    go = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)
    gr = torch.randn(rem.shape, generator=gen, dtype=torch.float64).to(rem.dtype)
    return torch.autograd.grad((out * go).sum() + (rem * gr).sum(), tensors)


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_both_paths_equal_the_authors_reference_forward_and_backward_in_fp64(attend_current, impl):
    q, k, v = inputs()
    # the authors' inputs: q, k shifted apart so that sigmoids spread over (0, 1) (tests/test_attn.py)
    q, k = (q + 1) * 1.5, (k - 1) * 1.5
    path = stickbreaking_naive if impl == "naive" else lambda *a, **kw: stickbreaking_chunked(*a, **kw, block_size=4)
    ours = path(q, k, v, attend_current=attend_current)
    theirs = authors_ref_fwd(q, k, v, attend_current, remainder=False)
    assert max_error(ours, theirs) < 1e-13
    assert max_error(grads(*ours, (q, k, v)), grads(*theirs, (q, k, v))) < 1e-12
    # the remainder on the query's own value, as the authors' tests add it
    ours = stickbreaking_attention(q, k, v, attend_current=attend_current, remainder="value", impl=impl)
    theirs, _ = authors_ref_fwd(q, k, v, attend_current, remainder=True)
    go = torch.randn_like(ours)
    assert max_error([ours], [theirs]) < 1e-13
    ours_grads, their_grads = (torch.autograd.grad((o * go).sum(), (q, k, v)) for o in (ours, theirs))
    assert max_error(ours_grads, their_grads) < 1e-12


def test_a_decoding_step_equals_the_authors_decoding_step():
    q, k, v = inputs(s=9)
    for impl in ("naive", "chunked"):
        ours = stickbreaking_attention(q[..., -1:, :], k, v, impl=impl)
        theirs, _ = authors_decoding(q[..., -1:, :], k, v)
        assert max_error([ours], [theirs]) < 1e-14


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("block", [1, 4, 5, 13])
def test_the_chunked_path_equals_the_materialised_one(attend_current, segments, block):
    q, k, v = inputs()
    seg = SEG if segments else None
    naive = stickbreaking_naive(q, k, v, attend_current=attend_current, segment_ids=seg)
    chunked = stickbreaking_chunked(q, k, v, attend_current=attend_current, segment_ids=seg, block_size=block)
    assert max_error(naive, chunked) < 1e-14
    assert max_error(grads(*naive, (q, k, v)), grads(*chunked, (q, k, v))) < 1e-13


def test_the_chunked_backward_passes_gradcheck_with_a_kv_cache_offset():
    q, k, v = inputs(b=1, h=1, s=6, d=2)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    for sq in (6, 3):  # queries are the last sq keys
        qs = q[..., -sq:, :].detach().requires_grad_()
        for attend_current in (False, True):

            def fn(q_, k_, v_, attend_current=attend_current):
                return stickbreaking_chunked(q_, k_, v_, attend_current=attend_current, segment_ids=seg, block_size=2)

            assert torch.autograd.gradcheck(fn, (qs, k, v))


def test_a_document_alone_equals_the_document_in_a_packed_or_padded_row():
    q, k, v = inputs(b=1, s=13)
    seg = SEG[:1]  # two padding keys, then documents of 3 and 8 keys
    for impl in ("naive", "chunked"):
        packed = stickbreaking_attention(q, k, v, impl=impl, segment_ids=seg, remainder="value")
        for a, b in ((2, 5), (5, 13)):
            alone = stickbreaking_attention(
                q[..., a:b, :], k[..., a:b, :], v[..., a:b, :], impl=impl, remainder="value"
            )
            torch.testing.assert_close(packed[..., a:b, :], alone, atol=1e-15, rtol=0)


def test_rows_with_one_or_no_key():
    q, k, v = inputs(s=5)
    out, rem = stickbreaking_chunked(q, k, v)  # row 0 sees no key: output 0, the whole stick left, no gradient
    assert torch.all(out[..., 0, :] == 0) and torch.all(rem[..., 0] == 1)
    dq, dk, dv = grads(out, rem, (q, k, v))
    assert torch.all(dq[..., 0, :] == 0) and torch.all(dk[..., -1, :] == 0) and torch.all(dv[..., -1, :] == 0)
    out, rem = stickbreaking_chunked(q, k, v, attend_current=True)  # row 0 sees itself: sigmoid(z_00) of v_0
    weight = torch.sigmoid((q[..., 0, :] * k[..., 0, :]).sum(-1) / math.sqrt(8))
    torch.testing.assert_close(out[..., 0, :], weight[..., None] * v[..., 0, :])
    torch.testing.assert_close(rem[..., 0], 1 - weight)


def test_fp32_stays_finite_and_close_to_fp64_at_extreme_logits():
    """Log space: with logits up to |z| ~ 100 the sigmoids saturate in fp32, yet log A is a sum of logsigmoids and
    exp() of it keeps fp32 accuracy (the fp64 reference takes the same fp32-rounded inputs)."""
    q, k, v = inputs(b=1, h=2, s=300, d=8, seed=3)
    q32, k32, v32 = ((t * c).detach().float().requires_grad_() for t, c in ((q, 6), (k, 6), (v, 1)))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q32, k32, v32))
    ref = stickbreaking_chunked(q64, k64, v64)
    g64 = grads(*ref, (q64, k64, v64))
    for path in (stickbreaking_naive, stickbreaking_chunked):
        out = path(q32, k32, v32)
        assert all(torch.isfinite(t).all() for t in out)
        torch.testing.assert_close(out[0].double(), ref[0], atol=5e-5, rtol=0)
        g32 = grads(*out, (q32, k32, v32))
        assert all(torch.isfinite(g).all() for g in g32)
        assert max_error([g.double() for g in g32], g64) < 1e-3 * max(g.abs().max().item() for g in g64)


def test_the_chunked_path_saves_no_score_matrix():
    """O(S * block) memory: the forward saves q, k, v for the backward and nothing of size S^2."""
    q, k, v = inputs(b=1, h=1, s=256, d=4)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out, rem = stickbreaking_chunked(q, k, v)
    assert max(saved) == 256 * 4
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        stickbreaking_naive(q, k, v)
    assert max(saved) >= 256 * 256  # the materialised reference does


def test_logit_dropout_drops_the_logits_in_training_only():
    q, k, v = inputs(s=9)
    exact = stickbreaking_attention(q, k, v)
    assert torch.equal(stickbreaking_attention(q, k, v, logit_dropout=0.0), exact)
    torch.testing.assert_close(stickbreaking_attention(q, k, v, logit_dropout=1e-15), exact, atol=1e-12, rtol=0)
    torch.manual_seed(0)
    assert not torch.allclose(stickbreaking_attention(q, k, v, logit_dropout=0.3), exact)


def authors_layer_with_trained_weights(impl, n_heads=3):
    torch.manual_seed(0)
    layer = StickBreakingAttention(d_model=24, n_heads=n_heads, impl=impl).double()
    assert layer.norm.num_groups == n_heads and layer.norm.eps == 1e-5 and layer.norm.affine  # theirs
    assert torch.all(layer.head_bias == 0) and layer.head_bias.shape == (n_heads, 24 // n_heads)
    with torch.no_grad():  # trained-looking weights: a bias per head and channel, a norm away from 1 and 0
        layer.head_bias.normal_(), layer.norm.weight.uniform_(0.5, 1.5), layer.norm.bias.normal_()
        for proj in (layer.q_proj, layer.k_proj):
            proj.weight.mul_(3)
    return layer


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_the_layer_equals_the_authors_model_layer_forward_and_backward_in_fp64(impl):
    layer = authors_layer_with_trained_weights(impl)
    x = torch.randn(2, 13, 24, dtype=torch.float64, requires_grad=True)
    ours, theirs = layer(x), authors_sb_layer(layer, x)
    assert max_error([ours], [theirs]) < 1e-13
    go = torch.randn_like(ours)
    tensors = (x, *layer.parameters())
    ours_grads, their_grads = (torch.autograd.grad((o * go).sum(), tensors) for o in (ours, theirs))
    assert max_error(ours_grads, their_grads) < 1e-12
    names = ["x", *(name for name, _ in layer.named_parameters())]
    assert all(ours_grads[names.index(name)].abs().max() > 0 for name in ("head_bias", "norm.weight", "norm.bias"))


def test_a_cached_decoding_step_equals_the_authors_decoding_branch():
    layer = authors_layer_with_trained_weights("auto").eval()
    x = torch.randn(2, 9, 24, dtype=torch.float64)
    cache = LayerCache()
    with torch.no_grad():
        layer(x[:, :-1], cache=cache)
        ours = layer(x[:, -1:], cache=cache)
        theirs = authors_sb_layer(layer, x, decoding=True)
    assert max_error([ours], [theirs]) < 1e-13


def test_head_norm_false_is_the_plain_layer():
    torch.manual_seed(0)
    plain = StickBreakingAttention(d_model=16, n_heads=2, head_norm=False).double()
    assert not hasattr(plain, "head_bias") and not hasattr(plain, "norm")
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    q, k, v = (plain.split_heads(p(x)) for p in (plain.q_proj, plain.k_proj, plain.v_proj))
    out = stickbreaking_attention(q, k, v)
    expected = plain.o_proj(out.transpose(1, 2).reshape(2, 7, 16))
    assert max_error([plain(x)], [expected]) < 1e-15
    normed = StickBreakingAttention(d_model=16, n_heads=2).double()
    normed.load_state_dict(plain.state_dict(), strict=False)
    assert not torch.allclose(normed(x), plain(x))


def test_the_op_returns_the_remainder_on_both_paths():
    q, k, v = inputs(s=9)
    for impl in ("naive", "chunked"):
        out, rem = stickbreaking_attention(q, k, v, impl=impl, return_remainder=True)
        ref_out, ref_rem = stickbreaking_naive(q, k, v)
        assert max_error([out, rem], [ref_out, ref_rem]) < 1e-14
        out, rem = stickbreaking_attention(q, k, v, impl=impl, remainder="value", return_remainder=True)
        assert max_error([out], [ref_out + ref_rem[..., None] * v]) < 1e-14 and max_error([rem], [ref_rem]) < 1e-14
    torch.manual_seed(0)  # under logit dropout too (the naive path)
    out, rem = stickbreaking_attention(q, k, v, logit_dropout=0.3, return_remainder=True)
    assert out.shape == q.shape and rem.shape == q.shape[:-1] and torch.all(rem >= 0) and torch.all(rem <= 1)


def test_the_layer_options_and_bad_input():
    layer = StickBreakingAttention(d_model=16, n_heads=2, attend_current=True, remainder="value")
    assert layer(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    assert ModelConfig(attention="stickbreaking").attention_options.to_dict() == {
        "attend_current": False,
        "remainder": "none",
        "head_norm": True,
        "impl": "auto",
    }
    with pytest.raises(ValueError, match=r"StickBreakingOptions\.head_norm = 1; expected true or false"):
        StickBreakingAttention(16, 2, head_norm=1)
    with pytest.raises(ValueError, match=r"StickBreakingOptions\.remainder = 'renormalise'; expected one of"):
        ModelConfig(attention="stickbreaking", attention_options={"remainder": "renormalise"})
    with pytest.raises(ValueError, match=r"StickBreakingOptions\.impl = 'triton'; expected one of"):
        StickBreakingAttention(16, 2, impl="triton")
    q, k, v = inputs(s=4)
    with pytest.raises(ValueError, match=r"impl = 'chunked' with logit_dropout = 0\.1; expected impl 'naive'"):
        stickbreaking_attention(q, k, v, impl="chunked", logit_dropout=0.1)
    with pytest.raises(ValueError, match=r"remainder = 'bias'; expected one of \('none', 'value'\)"):
        stickbreaking_attention(q, k, v, remainder="bias")


def test_an_enclosing_autocast_changes_nothing():
    q, k, v = (t.detach().float() for t in inputs(s=9))
    for impl in ("naive", "chunked"):
        exact = stickbreaking_attention(q, k, v, impl=impl)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(stickbreaking_attention(q, k, v, impl=impl), exact)
