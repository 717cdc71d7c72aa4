"""Wall attention: the authors' reference and layer (ported below), the chunked path against the materialised one
(forward and backward, odd lengths, documents, windows, the scalar gate and the sink), fp32 stability under
strong decay, documents alone, the KV cache, rows with one or no key, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import LayerCache, WallAttention, WallOptions
from tra_attn.ops.wall import cumulative_decay, wall_attention, wall_chunked, wall_naive, wall_weights

FLA_COMMIT = "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89"  # fla-org/flash-linear-attention
RCP_LN2 = 1 / math.log(2)  # theirs (fla/ops/utils/constant.py): 1.4426950216, its fp32 rounding
SEG = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


def chunk_global_cumsum(s, cu_seqlens=None, scale=None):
    """What fla's ``chunk_global_cumsum`` (fla/ops/utils/cumsum.py, a Triton kernel) computes for the naive
    reference: the inclusive cumulative sum along T of s (B, T, H[, K]), restarting at each sequence of
    ``cu_seqlens``, times ``scale``; in the dtype of s (theirs: fp32)."""
    if cu_seqlens is not None:
        bounds = cu_seqlens.tolist()
        out = torch.cat([s[:, a:b].cumsum(1) for a, b in zip(bounds[:-1], bounds[1:])], 1)
    else:
        out = s.cumsum(1)
    return out if scale is None else out * scale


def naive_wall_attn(q, k, v, g, *, scale, window_size=None, cu_seqlens=None, sink_bias=None, g_scalar=None):
    """Ported from fla-org/flash-linear-attention, fla/ops/wall_attn/naive.py at commit
    bc3b101dcb713ddc5bd8924b66754eb68b5ccf89 (Tilde Research's eager reference, layout (B, T, H, K), base 2).
    Verbatim except that the ``.float()`` casts are dropped (fp64 compares the math), RCP_LN2 is exactly 1 / ln 2,
    and ``chunk_global_cumsum`` is the torch equivalent above."""
    if g.dim() != 4 or g.shape != (*q.shape[:-1], q.shape[-1]):
        raise ValueError("`g` must be [B, T, HQ, K] matching `q`")
    G = q.shape[2] // k.shape[2]
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError("HQ must be divisible by H (GQA)")

    P = chunk_global_cumsum(g, cu_seqlens=cu_seqlens, scale=RCP_LN2)
    k_exp = k.repeat_interleave(G, dim=2)
    B, T, HQ, _K = q.shape
    diff = P.unsqueeze(2) - P.unsqueeze(1)
    scores = (q.unsqueeze(2) * k_exp.unsqueeze(1) * torch.exp2(diff)).sum(-1).permute(0, 3, 1, 2).contiguous()

    i_idx = torch.arange(T, device=q.device, dtype=torch.long).view(1, T, 1)
    j_idx = torch.arange(T, device=q.device, dtype=torch.long).view(1, 1, T)
    valid = j_idx <= i_idx
    if window_size is not None:
        valid = valid & (i_idx - j_idx < window_size)
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError("reference varlen expects batch size 1")
        seg = torch.zeros(T, dtype=torch.long, device=q.device)
        for s in range(int(cu_seqlens.numel()) - 1):
            a = int(cu_seqlens[s].item())
            b = int(cu_seqlens[s + 1].item())
            seg[a:b] = s
        seg_i = seg.view(1, T, 1)
        seg_j = seg.view(1, 1, T)
        valid = valid & (seg_i == seg_j)

    valid_hq = valid.unsqueeze(1).expand(B, HQ, T, T)
    scores = scores.masked_fill(~valid_hq, float("-inf")) * (scale * RCP_LN2)

    if g_scalar is not None:
        c = chunk_global_cumsum(g_scalar, cu_seqlens=cu_seqlens, scale=RCP_LN2)
        c_hq = c.permute(0, 2, 1)
        scores = scores + c_hq.unsqueeze(-1) - c_hq.unsqueeze(-2)

    m = scores.amax(dim=-1, keepdim=True)
    m_stable = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp2(scores - m_stable)
    den = p.sum(dim=-1)
    if sink_bias is not None:
        sink_l2 = (sink_bias * RCP_LN2).view(1, HQ, 1)
        den = den + torch.exp2(sink_l2 - m_stable.squeeze(-1))
    w = p / den.unsqueeze(-1)
    v_h = v.repeat_interleave(G, dim=2).permute(0, 2, 1, 3).contiguous()
    o = torch.matmul(w, v_h).transpose(1, 2).contiguous()
    return o


def authors_layer(layer: WallAttention, hidden_states, window_size=None):
    """``WallAttention.forward`` of fla/layers/wall_attn.py (same commit), its path without a cache or mask, their
    defaults qk_norm and use_output_gate False: their gates, heads and scale on our layer's projections (the same
    shapes; theirs: ``g_proj``, ``gs_proj``; our output projection has a bias), with their naive reference in place
    of the Triton ``parallel_wall_attn``, rearrange as unflatten/flatten and no ``.float()`` (fp64)."""
    d = layer.head_dim
    q, k, v = layer.q_proj(hidden_states), layer.k_proj(hidden_states), layer.v_proj(hidden_states)
    g = F.logsigmoid(layer.gate_proj(hidden_states))
    use_scalar_gate = layer.scalar_gate_proj is not None
    gs = F.logsigmoid(layer.scalar_gate_proj(hidden_states)) if use_scalar_gate else None
    q, k, v, g = (t.unflatten(-1, (-1, d)) for t in (q, k, v, g))
    o = naive_wall_attn(q, k, v, g, scale=d**-0.5, g_scalar=gs, window_size=window_size)
    return layer.o_proj(o.flatten(-2))


def inputs(b=2, h=3, s=13, d=4, seed=0, gate_scale=2.0, dtype=torch.float64):
    """q, k, v (B, H, S, D), per-channel log gates (B, H, S, D), scalar log gates (B, H, S) and sink logits (H,)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    g = F.logsigmoid(gate_scale * torch.randn(b, h, s, d, generator=gen, dtype=torch.float64))
    gs = F.logsigmoid(torch.randn(b, h, s, generator=gen, dtype=torch.float64) + 1)
    sink = torch.randn(h, generator=gen, dtype=torch.float64)
    return [t.to(dtype).requires_grad_() for t in (q, k, v, g, gs, sink)]


def grads(out, tensors, seed=1):
    gen = torch.Generator().manual_seed(seed)
    go = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)
    return torch.autograd.grad((out * go).sum(), tensors)


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def ours(q, k, v, g, gs=None, sink=None, impl="naive", window=0, segment_ids=None, block=None, q_rows=None):
    """Our op from the log gates (the last ``q_rows`` queries, all by default)."""
    P, c = cumulative_decay(g, segment_ids), None if gs is None else cumulative_decay(gs, segment_ids)
    q = q if q_rows is None else q[..., q.shape[-2] - q_rows :, :]
    if impl == "chunked":
        return wall_chunked(q, k, v, P, c, sink, window=window, segment_ids=segment_ids, block_size=block)
    return wall_attention(q, k, v, P, scalar_decay=c, sink=sink, window=window, impl=impl, segment_ids=segment_ids)


def theirs(q, k, v, g, gs=None, sink=None, window=0, cu_seqlens=None):
    """Their reference on our layout (B, H, S, D): transposed in and out."""
    t = [x.transpose(1, 2) for x in (q, k, v, g)]
    o = naive_wall_attn(
        *t,
        scale=q.shape[-1] ** -0.5,
        window_size=window or None,
        cu_seqlens=cu_seqlens,
        sink_bias=sink,
        g_scalar=None if gs is None else gs.transpose(1, 2),
    )
    return o.transpose(1, 2)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
@pytest.mark.parametrize("window", [0, 5])
@pytest.mark.parametrize("extras", ["none", "scalar_gate", "sink", "both"])
def test_both_paths_equal_the_authors_reference_forward_and_backward_in_fp64(impl, window, extras):
    q, k, v, g, gs, sink = inputs()
    gs = gs if extras in ("scalar_gate", "both") else None
    sink = sink if extras in ("sink", "both") else None
    mine = ours(q, k, v, g, gs, sink, impl=impl, window=window, block=4)
    ref = theirs(q, k, v, g, gs, sink, window=window)
    assert max_error([mine], [ref]) < 1e-13
    used = [t for t in (q, k, v, g, gs, sink) if t is not None]
    assert max_error(grads(mine, used), grads(ref, used)) < 1e-12


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_packed_documents_equal_the_authors_varlen_reference(impl):
    """Their cu_seqlens restart P at each document's start; our segment ids zero the gate there: the same."""
    q, k, v, g, gs, sink = inputs(b=1)
    seg = torch.tensor([[0] * 5 + [1] * 8], dtype=torch.int32)
    mine = ours(q, k, v, g, gs, sink, impl=impl, segment_ids=seg, block=3)
    ref = theirs(q, k, v, g, gs, sink, cu_seqlens=torch.tensor([0, 5, 13]))
    assert max_error([mine], [ref]) < 1e-13
    assert max_error(grads(mine, (q, k, v, g, gs, sink)), grads(ref, (q, k, v, g, gs, sink))) < 1e-12


@pytest.mark.parametrize("extras", [{}, {"scalar_gate": True}, {"window": 4}])
def test_the_layer_equals_the_authors_layer(extras):
    torch.manual_seed(0)
    layer = WallAttention(d_model=16, n_heads=2, **extras).double()
    with torch.no_grad():  # strong, varied decay (the initial bias 8 is near-plain attention)
        layer.gate_proj.bias.normal_(0.0, 2.0)
        if layer.scalar_gate_proj is not None:
            layer.scalar_gate_proj.bias.normal_(0.0, 2.0)
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    expected = authors_layer(layer, x, extras.get("window"))
    torch.testing.assert_close(layer(x), expected, atol=1e-13, rtol=0)


def test_gate_max_is_the_authors_soft_clamp_of_the_log_gates():
    """The authors' release applies g_max * expm1(g / g_max) to each token's per-channel log gate (g_max 0.86):
    the layer with gate_max equals the authors' layer fed the clamped gates, and the model passes the KV-cache
    equality with it."""
    torch.manual_seed(0)
    layer = WallAttention(d_model=16, n_heads=2, gate_max=0.86).double()
    with torch.no_grad():
        layer.gate_proj.bias.normal_(0.0, 2.0)
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    d = layer.head_dim
    q, k, v = (t.unflatten(-1, (-1, d)) for t in (layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)))
    g = F.logsigmoid(layer.gate_proj(x))
    g = (0.86 * torch.expm1(g / 0.86)).unflatten(-1, (-1, d))
    assert g.min() > -0.86
    expected = layer.o_proj(naive_wall_attn(q, k, v, g, scale=d**-0.5).flatten(-2))
    torch.testing.assert_close(layer(x), expected, atol=1e-13, rtol=0)
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=16, n_layers=2, n_heads=2, attention="wall",
                                      attention_options={"gate_max": 0.86})).double().eval()  # fmt: skip
    ids = torch.randint(0, 13, (2, 9))
    full = model(ids)
    cache = model.new_cache()
    steps = torch.cat(
        [model(ids[:, :5], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(5, 9)], 1
    )
    torch.testing.assert_close(steps, full, atol=1e-10, rtol=0)


def test_the_gate_biases_start_at_the_authors_value():
    layer = WallAttention(d_model=16, n_heads=2, scalar_gate=True, sink=True, sink_init=-1.0)
    assert torch.all(layer.gate_proj.bias == 8.0) and torch.all(layer.scalar_gate_proj.bias == 8.0)
    assert layer.gate_proj.weight.shape == (16, 16) and layer.scalar_gate_proj.weight.shape == (2, 16)
    assert torch.all(layer.sink == -1.0)
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=16, n_layers=1, n_heads=2, attention="wall"))
    assert torch.all(model.blocks[0].attn.gate_proj.bias == 8.0)  # the model's initialisation keeps them


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("q_rows", [13, 5, 1])
@pytest.mark.parametrize("block", [1, 4, 5, 13])
def test_the_chunked_path_equals_the_materialised_one(segments, window, q_rows, block):
    tensors = inputs()
    seg = SEG if segments else None
    naive = ours(*tensors, impl="naive", window=window, segment_ids=seg, q_rows=q_rows)
    chunked = ours(*tensors, impl="chunked", window=window, segment_ids=seg, q_rows=q_rows, block=block)
    assert max_error([naive], [chunked]) < 1e-14
    assert max_error(grads(naive, tensors), grads(chunked, tensors)) < 1e-13


def test_the_chunked_backward_passes_gradcheck_with_a_kv_cache_offset():
    q, k, v, g, gs, sink = (t.detach() for t in inputs(b=1, h=1, s=6, d=2))
    P, c = cumulative_decay(g), cumulative_decay(gs)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    for sq in (6, 3):  # queries are the last sq keys
        args = [t.clone().requires_grad_() for t in (q[..., -sq:, :], k, v, P, c, sink)]

        def fn(*a):
            return wall_chunked(*a, window=4, segment_ids=seg, block_size=2)

        assert torch.autograd.gradcheck(fn, args)


def test_fp32_stays_finite_and_close_to_fp64_under_strong_decay():
    """Gates down to log a ~ -8 per step and channel: P reaches ~ -2000, so exp(-P_j) would overflow fp32; the
    anchored blocks stay finite and agree with the fp64 reference on the same fp32-rounded inputs."""
    q, k, v, g, gs, sink = inputs(b=1, h=2, s=300, d=8, seed=3, gate_scale=4.0)
    g = (g - 3).detach()
    assert cumulative_decay(g).min() < -1000
    t32 = [t.detach().float().requires_grad_() for t in (q, k, v, g, gs, sink)]
    t64 = [t.detach().double().requires_grad_() for t in t32]
    ref = ours(*t64, impl="naive")
    g64 = grads(ref, t64)
    for impl in ("naive", "chunked"):
        out = ours(*t32, impl=impl)
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
        g32 = grads(out, t32)
        assert all(torch.isfinite(x).all() for x in g32)
        assert max_error([x.double() for x in g32], g64) < 1e-4 * max(x.abs().max().item() for x in g64)


def test_the_chunked_path_saves_no_score_matrix():
    """O(S * block * D) memory: the forward saves its inputs and output for the backward, nothing of size S^2."""
    q, k, v, g, gs, sink = inputs(b=1, h=1, s=256, d=4)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        wall_chunked(q, k, v, cumulative_decay(g), cumulative_decay(gs), sink)
    assert max(saved) == 256 * 4
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        wall_naive(q, k, v, cumulative_decay(g))
    assert max(saved) >= 256 * 256 * 4  # the materialised reference does


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_a_document_alone_equals_the_document_in_a_packed_or_padded_row(impl):
    q, k, v, g, gs, sink = inputs(b=1)
    seg = SEG[:1]  # two padding keys, then documents of 3 and 8 keys
    for window in (0, 3):
        packed = ours(q, k, v, g, gs, sink, impl=impl, window=window, segment_ids=seg, block=4)
        for a, b in ((2, 5), (5, 13)):
            doc = [t[..., a:b, :] for t in (q, k, v, g)] + [gs[..., a:b]]
            alone = ours(*doc, sink, impl=impl, window=window, block=4)
            torch.testing.assert_close(packed[..., a:b, :], alone, atol=1e-14, rtol=0)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_the_layer_decodes_through_the_cache_as_one_forward_and_packs_documents(impl):
    torch.manual_seed(1)
    layer = WallAttention(16, 2, scalar_gate=True, sink=True, window=4, impl=impl).double().eval()
    with torch.no_grad():
        layer.gate_proj.bias.normal_(0.0, 2.0)
        layer.scalar_gate_proj.bias.normal_(0.0, 2.0)
        layer.sink.normal_()
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    with torch.no_grad():
        full = layer(x)
        cache = LayerCache()
        parts = [layer(x[:, a:b], cache) for a, b in ((0, 4), (4, 5), (5, 6), (6, 13))]
        assert cache.length == 13 and set(cache.extras) == {"log_decay", "scalar_decay"}
        torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-12, rtol=0)
        packed = layer(x, segment_ids=SEG)
        for row, a, b in ((0, 2, 5), (0, 5, 13), (1, 0, 9)):
            torch.testing.assert_close(packed[row, a:b], layer(x[row : row + 1, a:b])[0], atol=1e-12, rtol=0)
        cache = LayerCache()  # a packed row decoded through the cache: the segment ids of every key so far
        parts = [layer(x[:, a:b], cache, segment_ids=SEG[:, :b]) for a, b in ((0, 6), (6, 7), (7, 13))]
        torch.testing.assert_close(torch.cat(parts, 1), packed, atol=1e-12, rtol=0)


def test_rows_with_one_or_no_key():
    q, k, v, g, gs, sink = inputs(s=5)
    for impl in ("naive", "chunked"):
        out = ours(q, k, v, g, impl=impl)  # row 0 sees its own key only: weight 1 on v_0
        torch.testing.assert_close(out[..., 0, :], v[..., 0, :], atol=1e-15, rtol=0)
        out = ours(q, k, v, g, sink=sink, impl=impl, window=1)  # every row sees itself only, beside the sink
        weight = torch.sigmoid((q * k).sum(-1) / 2 - sink[:, None])  # exp(s) / (exp(s) + exp(sink)), decay 1
        torch.testing.assert_close(out, weight[..., None] * v, atol=1e-15, rtol=0)
    logits = torch.randn(2, 3, 4, 4, dtype=torch.float64, requires_grad=True)
    visible = torch.ones(4, 4, dtype=torch.bool).tril()
    visible[0] = False  # row 0 sees no key: zero weights (with a sink: all on the sink), no NaN, no gradient
    weights = wall_weights(logits, visible)
    assert torch.all(weights[..., 0, :] == 0)
    with_sink = wall_weights(logits, visible, sink[:3])
    assert torch.all(with_sink[..., 0, :4] == 0) and torch.all(with_sink[..., 0, 4] == 1)
    (grad,) = torch.autograd.grad((weights * torch.randn_like(weights)).sum() + with_sink[..., 1:, :].sum(), logits)
    assert torch.isfinite(grad).all() and torch.all(grad[..., 0, :] == 0)


def test_logit_dropout_drops_the_logits_in_training_only():
    q, k, v, g, gs, sink = inputs(s=9)
    P = cumulative_decay(g)
    exact = wall_attention(q, k, v, P, sink=sink)
    assert torch.equal(wall_attention(q, k, v, P, sink=sink, logit_dropout=0.0), exact)
    almost = wall_attention(q, k, v, P, sink=sink, logit_dropout=1e-15)
    torch.testing.assert_close(almost, exact, atol=1e-12, rtol=0)
    torch.manual_seed(0)
    assert not torch.allclose(wall_attention(q, k, v, P, sink=sink, logit_dropout=0.3), exact)


def test_the_layer_options_and_bad_input():
    assert ModelConfig(attention="wall").attention_options.to_dict() == {
        "gate_bias_init": 8.0,
        "scalar_gate": False,
        "sink": False,
        "sink_init": 0.0,
        "window": 0,
        "gate_max": 0.0,
        "impl": "auto",
    }
    assert WallAttention.materializes(WallOptions(impl="naive")) and not WallAttention.materializes(WallOptions())
    layer = WallAttention(16, 2, scalar_gate=True, sink=True, window=2)
    assert layer(torch.randn(2, 5, 16)).shape == (2, 5, 16)
    with pytest.raises(ValueError, match=r"WallOptions\.window = -1; expected a non-negative integer"):
        ModelConfig(attention="wall", attention_options={"window": -1})
    with pytest.raises(ValueError, match=r"WallOptions\.impl = 'triton'; expected one of"):
        WallAttention(16, 2, impl="triton")
    q, k, v, g, gs, sink = inputs(s=4)
    P = cumulative_decay(g)
    with pytest.raises(ValueError, match=r"impl = 'chunked' with logit_dropout = 0\.1; expected impl 'naive'"):
        wall_attention(q, k, v, P, impl="chunked", logit_dropout=0.1)
    with pytest.raises(ValueError, match=r"impl = 'fused'; expected one of \('auto', 'naive', 'chunked'\)"):
        wall_attention(q, k, v, P, impl="fused")
    with pytest.raises(ValueError, match=r"log_decay\.shape = \(2, 3, 4\); expected \(B, H, Sk, D\)"):
        wall_attention(q, k, v, gs)


def test_an_enclosing_autocast_changes_nothing():
    q, k, v, g, gs, sink = (t.detach().float() for t in inputs(s=9))
    for impl in ("naive", "chunked"):
        exact = ours(q, k, v, g, gs, sink, impl=impl)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(ours(q, k, v, g, gs, sink, impl=impl), exact)


def test_a_packed_forward_with_every_option_has_no_graph_breaks():
    layer = WallAttention(16, 2, scalar_gate=True, sink=True, window=3)
    seg = torch.tensor([[0] * 9 + [1] * 8, [-1] * 3 + [2] * 14])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(layer)(torch.randn(2, 17, 16), segment_ids=seg)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]
