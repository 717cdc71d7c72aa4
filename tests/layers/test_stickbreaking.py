"""Stick-breaking attention: the authors' reference (ported below), the chunked path against the materialised one
(forward and backward, odd lengths, documents), log-space numerics in fp32, rows with one or no key, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig
from tra_attn.layers import StickBreakingAttention
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


def test_the_layer_options_and_bad_input():
    layer = StickBreakingAttention(d_model=16, n_heads=2, attend_current=True, remainder="value")
    assert layer(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    assert ModelConfig(attention="stickbreaking").attention_options.to_dict() == {
        "attend_current": False,
        "remainder": "none",
        "impl": "auto",
    }
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
