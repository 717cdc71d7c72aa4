"""alpha-entmax and ASEntmax: the authors' entmax (bisection and exact sort, ported below) and their ASEntmax layer
(ported), the chunked path against the materialised one (forward and backward, odd lengths, documents), exact
zeros with finite gradients, rows with a single key, fp32, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import Function

from tra_attn import ModelConfig
from tra_attn.layers import ASEntmaxAttention
from tra_attn.ops.asentmax import _threshold, entmax, entmax_attention, entmax_chunked, entmax_naive

# --- Ported from deep-spin/entmax at commit c2bec6d5e7d649cba7766c2172d89123ec2a6d70 ---------------------------


class AuthorsEntmaxBisect(Function):
    """entmax/root_finding.py, ``EntmaxBisectFunction`` (forward and backward; the gradient for alpha left out)."""

    @classmethod
    def _gp(cls, x, alpha):
        return x ** (alpha - 1)

    @classmethod
    def _gp_inv(cls, y, alpha):
        return y ** (1 / (alpha - 1))

    @classmethod
    def _p(cls, X, alpha):
        return cls._gp_inv(torch.clamp(X, min=0), alpha)

    @classmethod
    def forward(cls, ctx, X, alpha=1.5, dim=-1, n_iter=50, ensure_sum_one=True):
        if not isinstance(alpha, torch.Tensor):
            alpha = torch.tensor(alpha, dtype=X.dtype, device=X.device)
        alpha_shape = list(X.shape)
        alpha_shape[dim] = 1
        alpha = alpha.expand(*alpha_shape)
        ctx.alpha = alpha
        ctx.dim = dim
        d = X.shape[dim]
        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X * (alpha - 1)
        max_val = max_val * (alpha - 1)
        tau_lo = max_val - cls._gp(1, alpha)
        tau_hi = max_val - cls._gp(1 / d, alpha)
        dm = tau_hi - tau_lo
        for _ in range(n_iter):
            dm /= 2
            tau_m = tau_lo + dm
            p_m = cls._p(X - tau_m, alpha)
            f_m = p_m.sum(dim) - 1
            mask = (f_m >= 0).unsqueeze(dim)
            tau_lo = torch.where(mask, tau_m, tau_lo)
        if ensure_sum_one:
            p_m /= p_m.sum(dim=dim).unsqueeze(dim=dim)
        ctx.save_for_backward(p_m)
        return p_m

    @classmethod
    def backward(cls, ctx, dY):
        (Y,) = ctx.saved_tensors
        gppr = torch.where(Y > 0, Y ** (2 - ctx.alpha), Y.new_zeros(1))
        dX = dY * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None, None, None, None


def _make_ix_like(X, dim):
    """entmax/activations.py."""
    d = X.size(dim)
    rho = torch.arange(1, d + 1, device=X.device, dtype=X.dtype)
    view = [1] * X.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


def _entmax_threshold_and_support(X, dim=-1):
    """entmax/activations.py, the full-sort branch (k=None)."""
    Xsrt, _ = torch.sort(X, dim=dim, descending=True)
    rho = _make_ix_like(Xsrt, dim)
    mean = Xsrt.cumsum(dim) / rho
    mean_sq = (Xsrt**2).cumsum(dim) / rho
    ss = rho * (mean_sq - mean**2)
    delta = (1 - ss) / rho
    delta_nz = torch.clamp(delta, 0)
    tau = mean - torch.sqrt(delta_nz)
    support_size = (tau <= Xsrt).sum(dim).unsqueeze(dim)
    tau_star = tau.gather(dim, support_size - 1)
    return tau_star, support_size


def _sparsemax_threshold_and_support(X, dim=-1):
    """entmax/activations.py, the full-sort branch (k=None)."""
    topk, _ = torch.sort(X, dim=dim, descending=True)
    topk_cumsum = topk.cumsum(dim) - 1
    rhos = _make_ix_like(topk, dim)
    support = rhos * topk > topk_cumsum
    support_size = support.sum(dim=dim).unsqueeze(dim)
    tau = topk_cumsum.gather(dim, support_size - 1)
    tau /= support_size.to(X.dtype)
    return tau, support_size


class AuthorsEntmax15(Function):
    """entmax/activations.py, ``Entmax15Function``: the exact sort-based 1.5-entmax."""

    @classmethod
    def forward(cls, ctx, X, dim=-1):
        ctx.dim = dim
        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val
        X = X / 2
        tau_star, _ = _entmax_threshold_and_support(X, dim=dim)
        Y = torch.clamp(X - tau_star, min=0) ** 2
        ctx.save_for_backward(Y)
        return Y

    @classmethod
    def backward(cls, ctx, dY):
        (Y,) = ctx.saved_tensors
        gppr = Y.sqrt()
        dX = dY * gppr
        q = dX.sum(ctx.dim) / gppr.sum(ctx.dim)
        q = q.unsqueeze(ctx.dim)
        dX -= q * gppr
        return dX, None


class AuthorsSparsemax(Function):
    """entmax/activations.py, ``SparsemaxFunction``: the exact sort-based sparsemax (2-entmax)."""

    @classmethod
    def forward(cls, ctx, X, dim=-1):
        ctx.dim = dim
        max_val, _ = X.max(dim=dim, keepdim=True)
        X = X - max_val
        tau, supp_size = _sparsemax_threshold_and_support(X, dim=dim)
        output = torch.clamp(X - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @classmethod
    def backward(cls, ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze(dim)
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None


# --- Ported from deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d ---------------------------


def get_nape_slopes(num_heads: int, num_alibi_heads: int, slope_type: str = "linear"):
    """sparse_gemma.py, verbatim."""
    if slope_type == "linear":
        slopes = 1 / (torch.arange(1, num_alibi_heads + 1, dtype=torch.float32))
    elif slope_type == "exp":
        slopes = 1 / 2 ** (torch.arange(0, num_alibi_heads, dtype=torch.float32))
    else:
        raise NotImplementedError
    return torch.cat((slopes, torch.zeros(num_heads - num_alibi_heads)))


def make_bias_tensor(slopes: torch.Tensor, max_length: int):
    """sparse_gemma.py, verbatim."""
    pos_indices = torch.arange(max_length)
    position_diff = pos_indices[None, :] - pos_indices[:, None]
    position_diff = torch.tril(position_diff)
    # Apply slopes - multiply each head's slope by the position differences
    return (slopes.view(1, -1, 1, 1) * position_diff.view(1, 1, max_length, max_length)).contiguous()


def authors_asentmax_layer(layer, hidden_states, alpha, apply_nape=False, scaled=True, max_seq_len=64):
    """synthetic/src/models/architectures/sparse_gemma.py, ``SparseGemma2Attention``: the projections, with
    ``apply_nape`` the NAPE heads of ``__init__`` (``alibi_num_heads = num_attention_heads // 2``, "linear" slopes, the
    eager path's ``make_bias_tensor``), with ``scaled`` the "adapt-softplus-tanh" branch of ``_apply_length_scaling``
    (attn_scale_delta 1, attn_scale_gamma_range 2, the last ``num_scaled_heads`` heads) and the eager path with
    ``entmax_bisect`` (every head, the ALiBi ones too) and Hugging Face's additive causal mask, on ``layer``'s
    weights; no RoPE (``apply_rotary: False``). Verbatim except that the weights stay in the inputs' dtype (no fp32
    upcast; the slopes and bias table are cast to it)."""
    bsz, q_len, _ = hidden_states.size()
    num_heads, head_dim = layer.n_heads, layer.head_dim
    if apply_nape:
        alibi_num_heads = num_heads // 2
        _num_nope_heads = num_heads - alibi_num_heads
        alibi_slopes = get_nape_slopes(num_heads, alibi_num_heads, "linear")
        alibi_bias = make_bias_tensor(alibi_slopes, max_seq_len).to(hidden_states.dtype)
    num_scaled_heads = _num_nope_heads if apply_nape else num_heads
    query_states = layer.q_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    key_states = layer.k_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    value_states = layer.v_proj(hidden_states).view(bsz, q_len, num_heads, head_dim).transpose(1, 2)
    k_len = key_states.shape[-2]
    if scaled:
        log_position = torch.log(torch.arange(2, max_seq_len + 2, dtype=hidden_states.dtype)).reshape(1, 1, -1, 1)
        log_position_slice = log_position[:, :, k_len - q_len : k_len, :]
        scaled_queries = query_states[:, -num_scaled_heads:].clone()
        attn_scale_beta = F.softplus(layer.beta_proj(hidden_states))
        attn_scale_beta = attn_scale_beta.view(bsz, q_len, num_scaled_heads, 1).transpose(1, 2)
        attn_scale_gamma = 2 * torch.tanh(layer.gamma_proj(hidden_states))
        attn_scale_gamma = attn_scale_gamma.view(bsz, q_len, num_scaled_heads, 1).transpose(1, 2)
        attn_scaler = 1 + attn_scale_beta * (log_position_slice**attn_scale_gamma)
        query_states[:, -num_scaled_heads:] = scaled_queries * attn_scaler
    query_states = query_states * (1 / head_dim**0.5)
    attn_weights = torch.matmul(query_states, key_states.transpose(2, 3))
    if apply_nape:
        attn_weights = attn_weights + alibi_bias[..., -q_len:, -k_len:]
    future = torch.ones(q_len, k_len, dtype=torch.bool).triu(1)
    causal_mask = torch.zeros(q_len, k_len, dtype=attn_weights.dtype).masked_fill(
        future, torch.finfo(attn_weights.dtype).min
    )
    attn_weights = AuthorsEntmaxBisect.apply(attn_weights + causal_mask, alpha)
    attn_output = torch.matmul(attn_weights, value_states)
    return layer.o_proj(attn_output.transpose(1, 2).contiguous().reshape(bsz, q_len, -1))


# ------------------------------------------------------------------------------------------------------------------

SEG = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [2] * 9 + [-1] * 4], dtype=torch.int32)


def inputs(b=2, h=3, s=13, d=8, seed=0, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    return (q * spread).requires_grad_(), k.requires_grad_(), v.requires_grad_()


def grads(out, tensors, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(out.dtype)
    return torch.autograd.grad((out * go).sum(), tensors)


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def ragged_rows(seed=0):
    """Rows of 1 to 12 scores (fp64), padded with -inf: entmax of a row must ignore its padding."""
    gen = torch.Generator().manual_seed(seed)
    z = 2 * torch.randn(12, 12, generator=gen, dtype=torch.float64)
    return z.masked_fill(torch.ones(12, 12, dtype=torch.bool).triu(1), float("-inf")).requires_grad_()


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.25])
def test_entmax_equals_the_authors_bisection_and_exact_sort_forward_and_backward(alpha):
    z = ragged_rows()
    ours = entmax(z, alpha)
    go = torch.randn(12, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (ours_grad,) = torch.autograd.grad((ours * go).sum(), z)
    references = [lambda row: AuthorsEntmaxBisect.apply(row, alpha)]
    references += {1.5: [AuthorsEntmax15.apply], 2.0: [AuthorsSparsemax.apply]}.get(alpha, [])
    for reference in references:
        for i in range(12):  # each row on its own keys, as the authors' functions take no mask
            row = z[i, : i + 1]
            theirs = reference(row)
            (their_grad,) = torch.autograd.grad((theirs * go[i, : i + 1]).sum(), row)
            assert (ours[i, : i + 1] - theirs).abs().max() < 1e-14
            assert (ours_grad[i, : i + 1] - their_grad).abs().max() < 1e-13
            assert torch.all(ours[i, i + 1 :] == 0) and torch.all(ours_grad[i, i + 1 :] == 0)


@pytest.mark.parametrize("alpha", [1.5, 2.0])
def test_the_exact_threshold_equals_bisection_with_ties_and_empty_rows(alpha):
    """The sort-based threshold (alpha 1.5 and 2) against 50 bisection steps: tied scores, a row of one key, a row
    of no key (all zeros), in fp64 and fp32."""
    z = ragged_rows().detach()
    z[5, :4] = 1.0  # ties at the top of a row
    z[7] = float("-inf")  # no visible key
    for dtype, tol in ((torch.float64, 1e-13), (torch.float32, 2e-6)):
        exact, tau, _ = _threshold(z.to(dtype), alpha, 50)
        bisected, tau_b, _ = _threshold(z.to(dtype), alpha, 50, exact=False)
        assert (exact - bisected).abs().max() < tol and (tau - tau_b)[z[:, 0] > float("-inf")].abs().max() < tol
        assert torch.all(exact[7] == 0) and exact[0, 0] == 1
        torch.testing.assert_close(exact.sum(-1)[z[:, 0] > float("-inf")], torch.ones(11, dtype=dtype))


@pytest.mark.parametrize("impl", ["naive", "chunked"])
@pytest.mark.parametrize("nape", [True, False])
@pytest.mark.parametrize("n_heads", [4, 3, 1])
@pytest.mark.parametrize("scaling", ["adaptive", "none"])
def test_the_layer_equals_the_authors_asentmax_layer_forward_and_backward(impl, nape, n_heads, scaling):
    torch.manual_seed(0)
    layer = ASEntmaxAttention(d_model=8 * n_heads, n_heads=n_heads, impl=impl, nape=nape, scaling=scaling).double()
    scaled = scaling == "adaptive"
    if scaled:
        assert layer.beta_proj.out_features == (n_heads - n_heads // 2 if nape else n_heads)
    with torch.no_grad():  # the authors' projections carry biases drawn by PyTorch's default initialisation
        if scaled:
            layer.beta_proj.bias.uniform_(-1, 1), layer.gamma_proj.bias.uniform_(-1, 1)
        for proj in (layer.q_proj, layer.k_proj):
            proj.weight.mul_(3)
    x = torch.randn(2, 13, 8 * n_heads, dtype=torch.float64, requires_grad=True)
    ours, theirs = layer(x), authors_asentmax_layer(layer, x, 1.5, apply_nape=nape, scaled=scaled)
    assert max_error([ours], [theirs]) < 1e-13
    tensors = (x, *layer.parameters())
    assert max_error(grads(ours, tensors), grads(theirs, tensors)) < 1e-12


def test_the_nape_slopes_and_that_they_matter():
    assert ASEntmaxAttention(32, 4).slopes.tolist() == [1.0, 0.5, 0.0, 0.0]
    assert torch.equal(ASEntmaxAttention(48, 6).slopes, get_nape_slopes(6, 3))  # fp32, as theirs
    assert get_nape_slopes(6, 3).tolist() == pytest.approx([1, 1 / 2, 1 / 3, 0, 0, 0], rel=1e-7)
    assert ASEntmaxAttention(24, 3).slopes.tolist() == [1.0, 0.0, 0.0]  # odd: H // 2 ALiBi heads, as theirs
    assert ASEntmaxAttention(16, 2, nape=False).slopes is None
    torch.manual_seed(0)
    nape, plain = ASEntmaxAttention(32, 4).double(), ASEntmaxAttention(32, 4, nape=False).double()
    x = torch.randn(1, 9, 32, dtype=torch.float64)
    assert not torch.allclose(nape(x), plain(x))  # (the scaling projections differ in size: nothing to copy)


@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("block", [1, 4, 13])
def test_the_chunked_path_with_alibi_slopes_equals_the_materialised_one(segments, block):
    q, k, v = inputs()
    seg, slopes = SEG if segments else None, torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    naive = entmax_naive(q, k, v, 1.5, segment_ids=seg, slopes=slopes)
    chunked = entmax_chunked(q, k, v, 1.5, segment_ids=seg, block_size=block, slopes=slopes)
    assert max_error([naive], [chunked]) < 1e-14
    assert max_error(grads(naive, (q, k, v)), grads(chunked, (q, k, v))) < 1e-13
    assert not torch.allclose(naive, entmax_naive(q, k, v, 1.5, segment_ids=seg))
    for sq in (1, 5):  # decoding: the last sq queries against every key
        tail = entmax_chunked(q[..., -sq:, :], k, v, 1.5, segment_ids=seg, block_size=block, slopes=slopes)
        torch.testing.assert_close(tail, naive[..., -sq:, :], atol=1e-14, rtol=0)


def test_alibi_slopes_in_a_packed_row_count_from_each_documents_start():
    q, k, v = inputs(b=1, s=13)
    slopes = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    for impl in ("naive", "chunked"):
        packed = entmax_attention(q, k, v, impl=impl, segment_ids=SEG[:1], slopes=slopes)
        for a, b in ((2, 5), (5, 13)):
            alone = entmax_attention(*(t[..., a:b, :] for t in (q, k, v)), impl=impl, slopes=slopes)
            torch.testing.assert_close(packed[..., a:b, :], alone, atol=1e-14, rtol=0)


def test_the_chunked_path_with_slopes_saves_no_score_matrix():
    q, k, v = inputs(b=1, h=2, s=256, d=4)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        entmax_chunked(q, k, v, 1.5, slopes=torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert max(saved) == 2 * 256 * 4


@pytest.mark.parametrize("alpha", [1.5, 2.0])
@pytest.mark.parametrize("segments", [False, True])
@pytest.mark.parametrize("block", [1, 4, 13])
def test_the_chunked_path_equals_the_materialised_one(alpha, segments, block):
    q, k, v = inputs()
    seg = SEG if segments else None
    naive = entmax_naive(q, k, v, alpha, segment_ids=seg)
    chunked = entmax_chunked(q, k, v, alpha, segment_ids=seg, block_size=block)
    assert max_error([naive], [chunked]) < 1e-14
    assert max_error(grads(naive, (q, k, v)), grads(chunked, (q, k, v))) < 1e-13


def test_the_chunked_backward_passes_gradcheck_with_a_kv_cache_offset():
    q, k, v = inputs(b=1, h=1, s=6, d=2)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    for sq, alpha in ((6, 1.5), (3, 2.0)):  # queries are the last sq keys
        qs = q[..., -sq:, :].detach().requires_grad_()

        def fn(q_, k_, v_, alpha=alpha):
            return entmax_chunked(q_, k_, v_, alpha, segment_ids=seg, block_size=2)

        assert torch.autograd.gradcheck(fn, (qs, k, v), fast_mode=True)


def test_a_document_alone_equals_the_document_in_a_packed_or_padded_row():
    q, k, v = inputs(b=1, s=13)
    for impl in ("naive", "chunked"):
        packed = entmax_attention(q, k, v, impl=impl, segment_ids=SEG[:1])
        for a, b in ((2, 5), (5, 13)):
            alone = entmax_attention(*(t[..., a:b, :] for t in (q, k, v)), impl=impl)
            torch.testing.assert_close(packed[..., a:b, :], alone, atol=1e-14, rtol=0)


def test_exact_zeros_with_finite_gradients_and_single_key_rows():
    q, k, v = inputs(spread=6.0)
    z = (q @ k.transpose(-1, -2)) / 8**0.5
    p = entmax(z.masked_fill(torch.ones(13, 13, dtype=torch.bool).triu(1), float("-inf")))
    assert (p[..., 6:, :7] == 0).float().mean() > 0.3  # sparse: many causal keys get exactly 0
    (dz,) = torch.autograd.grad((p * torch.randn_like(p)).sum(), z)
    assert torch.isfinite(dz).all() and torch.all(dz[p == 0] == 0)  # a zeroed key receives no gradient
    out = entmax_chunked(q, k, v, 1.5)
    assert torch.equal(out[..., 0, :], v[..., 0, :])  # row 0 has one key: weight exactly 1
    dq, _, _ = grads(out, (q, k, v))
    assert torch.all(dq[..., 0, :] == 0)


def test_fp32_stays_close_to_fp64():
    q, k, v = inputs(b=1, h=2, s=200, d=8, seed=3)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q32, k32, v32))
    ref = entmax_chunked(q64, k64, v64, 1.5)
    g64 = grads(ref, (q64, k64, v64))
    for path in (entmax_naive, entmax_chunked):
        out = path(q32, k32, v32, 1.5)
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
        g32 = grads(out, (q32, k32, v32))
        assert all(torch.isfinite(g).all() for g in g32)
        assert max_error([g.double() for g in g32], g64) < 1e-4 * max(g.abs().max().item() for g in g64)


def test_the_chunked_path_saves_no_score_matrix():
    """O(S * block) memory: the forward saves q, k, v and a threshold and normaliser per row, nothing of size S^2."""
    q, k, v = inputs(b=1, h=1, s=256, d=4)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        entmax_chunked(q, k, v, 1.5)
    assert max(saved) == 256 * 4


def test_logit_dropout_drops_the_logits_in_training_only():
    q, k, v = inputs(s=9)
    exact = entmax_attention(q, k, v)
    torch.testing.assert_close(entmax_attention(q, k, v, logit_dropout=1e-15), exact, atol=1e-12, rtol=0)
    torch.manual_seed(0)
    assert not torch.allclose(entmax_attention(q, k, v, logit_dropout=0.3), exact)


def test_the_layer_options_and_bad_input():
    plain = ASEntmaxAttention(d_model=16, n_heads=2, scaling="none", alpha=2)
    assert not hasattr(plain, "beta_proj") and plain.options.alpha == 2.0
    layer = ASEntmaxAttention(d_model=16, n_heads=2, beta_bias_init=1.0, gamma_bias_init=-0.5)
    assert torch.all(layer.beta_proj.bias == 1.0) and torch.all(layer.gamma_proj.bias == -0.5)
    with pytest.raises(ValueError, match=r"ASEntmaxOptions\.alpha = 1\.0; expected a number in \(1, 2\]"):
        ModelConfig(attention="asentmax", attention_options={"alpha": 1.0})
    with pytest.raises(ValueError, match=r"ASEntmaxOptions\.alpha = 2\.5; expected a number in \(1, 2\]"):
        ASEntmaxAttention(16, 2, alpha=2.5)
    with pytest.raises(ValueError, match=r"ASEntmaxOptions\.scaling = 'none' with beta_bias_init = 1\.0"):
        ModelConfig(attention="asentmax", attention_options={"scaling": "none", "beta_bias_init": 1.0})
    with pytest.raises(ValueError, match=r"ASEntmaxOptions\.scaling = 'log'; expected one of \('adaptive', 'none'\)"):
        ModelConfig(attention="asentmax", attention_options={"scaling": "log"})
    q, k, v = inputs(s=4)
    with pytest.raises(ValueError, match=r"entmax_attention: alpha = 1; expected a number in \(1, 2\]"):
        entmax_attention(q, k, v, alpha=1)
    with pytest.raises(ValueError, match=r"impl = 'chunked' with logit_dropout = 0\.1; expected impl 'naive'"):
        entmax_attention(q, k, v, impl="chunked", logit_dropout=0.1)


def test_an_enclosing_autocast_changes_nothing():
    q, k, v = (t.detach().float() for t in inputs(s=9))
    for impl in ("naive", "chunked"):
        exact = entmax_attention(q, k, v, impl=impl)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(entmax_attention(q, k, v, impl=impl), exact)
