"""PaTH attention: the op against the authors' naive reference (ported below; fp64, forward and backward) and against
explicit products of the transforms, blocks, carried (cached) keys, documents; the layer against the authors' layer
code (w, beta, the forget gate, the output, the cached keys their decoding step updates); bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import PaTHAttention, PaTHFoXAttention
from tra_attn.ops.path import document_short_conv, path_attention, path_reference


def authors_naive_path_attn(q, k, v, w, beta, g, scale, chunk_size=64):
    """Ported from fla-org/flash-linear-attention, fla/ops/path_attn/naive.py (``naive_path_attn``) at commit
    bc3b101dcb713ddc5bd8924b66754eb68b5ccf89: q, k, v, w (B, T, H, D), beta, g (B, T, H). Verbatim except: the inputs
    keep their dtype (the original casts to fp32) and so does A (created in the default dtype), einops' rearrange is
    unflatten/flatten, and the group expansion (HQ = H here) is left out."""
    original_dtype = q.dtype
    BT = chunk_size
    q, k, v, w, beta, g = (x.transpose(1, 2) for x in [q, k, v, w, beta, g])
    g_cumsum = g.cumsum(-1)
    b, h, l, _ = q.shape
    if l % BT != 0:
        padding_size = BT - l % BT
        q, k, w = (F.pad(x, (0, 0, 0, padding_size)) for x in [q, k, w])
        beta = F.pad(beta, (0, padding_size))
    seq_len = q.shape[2]
    w_beta = w * beta[..., None]
    q, k, w, w_beta = (x.unflatten(2, (-1, BT)) for x in [q, k, w, w_beta])
    mask = torch.triu(torch.ones(BT, BT, dtype=torch.bool, device=q.device), diagonal=0)
    T_mat = -(w_beta @ w.transpose(-1, -2)).masked_fill(mask, 0)
    for i in range(1, BT):
        T_mat[..., i, :i] = T_mat[..., i, :i].clone() + (
            T_mat[..., i, :, None].clone() * T_mat[..., :, :i].clone()
        ).sum(-2)
    T_mat = T_mat + torch.eye(BT, dtype=q.dtype, device=q.device)
    Twbk = T_mat @ (w_beta @ k.transpose(-1, -2)).masked_fill(mask, 0)
    qw = (q @ w.transpose(-1, -2)).tril()
    Twb = T_mat @ w_beta
    A_local = (q @ k.transpose(-1, -2)).tril() - qw @ Twbk
    q = q - qw @ Twb
    k = k - Twbk.transpose(-1, -2) @ w
    H_mat = w.transpose(-1, -2) @ Twb
    A = torch.zeros(b, h, seq_len, seq_len, device=q.device, dtype=q.dtype)
    q, k, w, w_beta = (x.flatten(2, 3) for x in [q, k, w, w_beta])
    for i in range(0, seq_len, BT):
        q_i = q[:, :, i : i + BT].clone()
        for j in range(i - BT, -BT, -BT):
            k_j = k[:, :, j : j + BT]
            A_ij = q_i @ k_j.transpose(-1, -2)
            A[:, :, i : i + BT, j : j + BT] = A_ij
            q_i = q_i - q_i @ H_mat[:, :, j // BT]
    for i in range(0, seq_len // BT):
        A[:, :, i * BT : i * BT + BT, i * BT : i * BT + BT] = A_local[:, :, i]
    A = A.masked_fill_(~torch.tril(torch.ones(seq_len, seq_len, device=q.device, dtype=torch.bool)), float("-inf"))
    A = A[:, :, :l, :l]
    A = A + g_cumsum[..., None] - g_cumsum[..., None, :]
    ref_o = (A * scale).softmax(-1).to(v) @ v
    return ref_o.to(original_dtype).transpose(1, 2)


def authors_rank_one_update(k, w, beta):
    """``rank_one_update`` of the decoding branch of fla/layers/path_attn.py (same repository and commit; theirs is
    torch.compile'd and computes in fp32): every cached key (..., H, D) through the new token's transform."""
    return k - beta[..., None] * (k * w).sum(-1, keepdim=True) * w


def authors_l2_norm(x, eps=1e-6):
    """fla/modules/l2norm.py (same commit), the Triton kernel's math: x / sqrt(sum x^2 + eps) over the last dim."""
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def authors_short_conv(conv, x):
    """fla's ``ShortConvolution`` (fla/modules/conv/short_conv.py, same commit) without its Triton backend: an
    nn.Conv1d (depthwise, causal padding kernel_size - 1, the first T outputs) and SiLU, on x (B, T, C)."""
    return F.silu(
        F.conv1d(x.transpose(1, 2), conv.weight, conv.bias, padding=conv.kernel_size[0] - 1, groups=x.shape[-1])
    )[..., : x.shape[1]].transpose(1, 2)


def authors_layer(layer, hidden_states, scale=None):
    """The training branch of ``PaTHAttention.forward`` in fla/layers/path_attn.py (same commit) on one sequence,
    with our modules in place of theirs (w_proj, w_conv for w_conv1d, beta_proj for bt_proj, fgate_proj for g_proj,
    o_proj, which has a bias here) and the naive reference (above) in place of ``parallel_path_attn``: (out, w, beta,
    g)."""
    b, t, _ = hidden_states.shape
    heads, d = layer.n_heads, layer.head_dim
    q = layer.q_proj(hidden_states)
    k = layer.k_proj(hidden_states)
    v = layer.v_proj(hidden_states)
    w = layer.w_proj(hidden_states)
    beta = layer.beta_proj(hidden_states).sigmoid() * 2  # allowing negative eigenvalues (theirs: .float())
    g = F.logsigmoid(layer.fgate_proj(hidden_states)) if layer.fgate_proj is not None else None
    if layer.w_conv is not None:
        w = authors_short_conv(layer.w_conv, w)
    q, k, v, w = (x.view(b, t, heads, d) for x in (q, k, v, w))
    w = authors_l2_norm(w)
    scale = d**-0.5 if scale is None else scale  # parallel_path_attn's default
    o = authors_naive_path_attn(q, k, v, w, beta, torch.zeros_like(beta) if g is None else g, scale)
    return layer.o_proj(o.reshape(b, t, -1)), w, beta, g


def inputs(b=2, h=3, s=11, d=6, seed=0, sk=None):
    """q (B, H, S, D), k, v (B, H, Sk, D), unit w, beta in (0, 2), log f, all fp64 and requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    sk = s if sk is None else sk

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k, v = randn(b, h, s, d), randn(b, h, sk, d), randn(b, h, sk, d)
    w = F.normalize(randn(b, h, s, d), dim=-1)
    beta = 2 * torch.rand(b, h, s, generator=gen, dtype=torch.float64)
    log_f = F.logsigmoid(randn(b, h, sk) + 2)
    return [x.requires_grad_() for x in (q, k, v, w, beta, log_f)]


def explicit_logits(q, k, w, beta):
    """s_ij = q_i^T H_i ... H_{j+1} k_j from the D x D matrices themselves (-inf for j > i)."""
    d, s = q.shape[-1], q.shape[-2]
    transforms = torch.eye(d, dtype=q.dtype) - beta[..., None, None] * w[..., :, None] * w[..., None, :]
    logits = torch.full((*q.shape[:-1], s), float("-inf"), dtype=q.dtype)
    for i in range(s):
        product = torch.eye(d, dtype=q.dtype).expand(*q.shape[:-2], d, d)
        for j in range(i, -1, -1):
            logits[..., i, j] = (q[..., i, None, :] @ product @ k[..., j, :, None])[..., 0, 0]
            product = product @ transforms[..., j, :, :]
    return logits


def max_error(a, b):
    return max((x - y).abs().max().item() for x, y in zip(a, b))


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("block", [None, 4, 11])
def test_the_op_equals_the_authors_naive_reference_forward_and_backward_in_fp64(gate, block):
    q, k, v, w, beta, log_f = inputs()
    g = log_f if gate else torch.zeros_like(log_f)
    ours, _ = path_attention(q, k, v, w, beta, log_f if gate else None, block_size=block, carried_keys=False)
    as_theirs = [x.transpose(1, 2) for x in (q, k, v, w, beta, g)]
    for chunk in (4, 64):  # their chunks: several (with a padded last one), and one
        theirs = authors_naive_path_attn(*as_theirs, scale=q.shape[-1] ** -0.5, chunk_size=chunk).transpose(1, 2)
        assert max_error([ours], [theirs]) < 1e-13
    grad = torch.randn_like(ours)
    wrt = (q, k, v, w, beta, log_f) if gate else (q, k, v, w, beta)
    ours_grads = torch.autograd.grad(ours, wrt, grad)
    their_grads = torch.autograd.grad(theirs, wrt, grad)
    assert max_error(ours_grads, their_grads) < 1e-12


def test_the_logits_are_the_explicit_products_of_the_transforms_of_positions_after_the_key():
    q, k, v, w, beta, _ = inputs(b=1, h=2, s=7, d=4)
    with torch.no_grad():
        weights = (q.shape[-1] ** -0.5 * explicit_logits(q, k, w, beta)).softmax(-1)
        for block in (1, 3, 7):
            out, _ = path_attention(q, k, v, w, beta, block_size=block)
            torch.testing.assert_close(out, weights @ v, atol=1e-13, rtol=0)
        # beta = 0 everywhere: plain causal attention
        zero = torch.zeros_like(beta)
        plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(path_reference(q, k, v, w, zero)[0], plain, atol=1e-13, rtol=0)


def test_carried_keys_continue_the_sequence_as_a_cache_does():
    """The returned keys are k_j through every later transform (the authors' decoding step applied token by token);
    a continuation over them (cached keys first) equals the whole sequence, with or without the gate."""
    q, k, v, w, beta, log_f = inputs(s=10)
    with torch.no_grad():
        full, keys = path_attention(q, k, v, w, beta, log_f, block_size=3)
        carried = k.transpose(1, 2)[:, :1]
        for t in range(1, 10):  # their cache, (B, T, H, D): past keys through the new transform, then the new key
            step = authors_rank_one_update(carried, w.transpose(1, 2)[:, t : t + 1], beta.transpose(1, 2)[:, t : t + 1])
            carried = torch.cat([step, k.transpose(1, 2)[:, t : t + 1]], dim=1)
        torch.testing.assert_close(keys, carried.transpose(1, 2), atol=1e-13, rtol=0)
        for cut in (1, 6, 9):
            head = [x[..., :cut, :] for x in (q, k, v, w)] + [x[..., :cut] for x in (beta, log_f)]
            first, prefix = path_attention(*head, block_size=4)
            cached = torch.cat([prefix, k[..., cut:, :]], dim=-2)
            rest, after = path_attention(q[..., cut:, :], cached, v, w[..., cut:, :], beta[..., cut:], log_f)
            torch.testing.assert_close(torch.cat([first, rest], dim=-2), full, atol=1e-13, rtol=0)
            torch.testing.assert_close(after, keys, atol=1e-13, rtol=0)


def test_packed_and_padded_documents_compute_what_each_computes_alone():
    """Padding's transforms and other documents' neither act nor show; the gate restarts at each document."""
    q, k, v, w, beta, log_f = inputs(b=1, s=13)
    seg = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, -1, -1]], dtype=torch.int32)
    with torch.no_grad():
        for block in (None, 2, 5):
            out, _ = path_attention(q, k, v, w, beta, log_f, segment_ids=seg, block_size=block)
            for start, end in ((2, 5), (5, 11)):
                piece = [x[..., start:end, :] for x in (q, k, v, w)] + [x[..., start:end] for x in (beta, log_f)]
                alone, _ = path_attention(*piece[:4], piece[4], piece[5])
                torch.testing.assert_close(out[..., start:end, :], alone, atol=1e-13, rtol=0)
            assert torch.isfinite(out).all()


def test_the_short_convolution_reads_only_its_documents_earlier_tokens():
    gen = torch.Generator().manual_seed(3)
    x, weight, bias = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((2, 5, 12), (5, 3), (5,)))
    conv = torch.nn.Conv1d(5, 5, 3, groups=5).double()
    with torch.no_grad():
        conv.weight.copy_(weight[:, None]), conv.bias.copy_(bias)
    expected = authors_short_conv(conv, x.transpose(1, 2)).transpose(1, 2)
    for sq in (12, 4, 1):  # the last sq positions, earlier ones from a cache
        torch.testing.assert_close(document_short_conv(x, weight, bias, sq), expected[..., -sq:], atol=1e-14, rtol=0)
    # documents and padding, also padding between two tokens of a document (a right-padded prompt continued)
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 2, 2, -1, -1], [-1, 3, 3, 3, -1, -1, 3, 3, 3, 3, 3, 3]])
    got = document_short_conv(x, weight, bias, 12, seg.int())
    for row, index in ((0, [0, 1, 2]), (0, [3, 4, 5, 6, 7]), (0, [8, 9]), (1, [1, 2, 3, 6, 7, 8, 9, 10, 11])):
        alone = authors_short_conv(conv, x[row : row + 1, :, index].transpose(1, 2)).transpose(1, 2)
        torch.testing.assert_close(got[row : row + 1, :, index], alone, atol=1e-14, rtol=0)
        torch.testing.assert_close(document_short_conv(x, weight, bias, 3, seg.int())[row, :, -1], got[row, :, -1])


@pytest.mark.parametrize("cls", [PaTHAttention, PaTHFoXAttention])
@pytest.mark.parametrize("options", [{}, {"w_rank": 0, "w_conv_size": 0}, {"w_conv_size": 4}])
def test_the_layer_equals_the_authors_layer_code(cls, options):
    torch.manual_seed(0)
    layer = cls(16, 2, **options).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    theirs, w, beta, g = authors_layer(layer, x)
    torch.testing.assert_close(layer(x), theirs, atol=1e-13, rtol=0)
    w_inputs = layer.w_proj(x).transpose(1, 2)
    torch.testing.assert_close(layer.transform_vectors(w_inputs, 9), w.transpose(1, 2), atol=1e-14, rtol=0)
    assert (g is None) == (cls is PaTHAttention) and isinstance(layer.w_proj, torch.nn.Sequential) == (
        "w_rank" not in options
    )
    # packed documents, as the authors' varlen path (cu_seqlens) runs each sequence: each alone
    seg = torch.tensor([[0] * 4 + [1] * 5, [-1] * 2 + [2] * 7], dtype=torch.int32)
    packed = layer(x, segment_ids=seg)
    for row, start, end in ((0, 0, 4), (0, 4, 9), (1, 2, 9)):
        alone, *_ = authors_layer(layer, x[row : row + 1, start:end])
        torch.testing.assert_close(packed[row : row + 1, start:end], alone, atol=1e-13, rtol=0)


def test_the_cache_holds_the_keys_the_authors_decoding_step_updates():
    """Prefill then decode: the cached keys are theirs (``rank_one_update`` at each new token), the outputs the
    full forward's; a right-padded prompt continued through the cache computes what the prompt alone does."""
    torch.manual_seed(1)
    config = ModelConfig(vocab_size=13, d_model=16, n_layers=1, n_heads=2, attention="path_fox")
    model = TransformerLM(config).double().eval()
    layer = model.blocks[0].attn
    ids = torch.randint(0, 13, (1, 8))
    seen = []
    hook = layer.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        full = model(ids)
        hook.remove()
        cache = model.new_cache()
        steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(5, 8)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)
        _, w, beta, _ = authors_layer(layer, seen[0])
        k = layer.k_proj(seen[0]).view(1, 8, 2, 8)
    carried = k[:, :1]
    for t in range(1, 8):  # their cache (B, T, H, D): the past keys through the new transform, then the new key
        carried = torch.cat([authors_rank_one_update(carried, w[:, t : t + 1], beta[:, t : t + 1]), k[:, t : t + 1]], 1)
    torch.testing.assert_close(cache[0].keys, carried.transpose(1, 2), atol=1e-12, rtol=0)
    # right padding, then a token through the cache: padding between the document's tokens shifts nothing
    batch = torch.cat([ids[:, :5], torch.zeros(1, 2, dtype=torch.long)], dim=1)
    with torch.no_grad():
        cache = model.new_cache()
        model(batch, cache=cache, attention_mask=torch.tensor([[1] * 5 + [0] * 2]))
        step = model(ids[:, 5:6], cache=cache)
        torch.testing.assert_close(step[:, -1], full[:, 5], atol=1e-12, rtol=0)


def test_bad_input_gets_clear_errors():
    q, k, v, w, beta, _ = inputs(s=4)
    with pytest.raises(ValueError, match=r"path_attention: q \(2, 3, 4, 6\).*expected w of q's shape"):
        path_attention(q, k, v, w[..., :3, :], beta)
    with pytest.raises(ValueError, match=r"PaTHOptions\.w_rank = -1; expected a non-negative integer"):
        PaTHAttention(16, 2, w_rank=-1)
    with pytest.raises(ValueError, match=r"\['gate'\] are not options of PaTHFoXAttention"):
        PaTHFoXAttention(16, 2, gate=True)
    assert PaTHFoXAttention(16, 2).options.forget_gate and not PaTHAttention(16, 2).options.forget_gate


def test_w_conv_init_std_draws_the_convolution_as_the_authors_model_does():
    """0 keeps PyTorch's default (kaiming-uniform: |w| <= 1/sqrt(3)); the authors' model draws it from N(0, 0.02)."""
    torch.manual_seed(0)
    default = TransformerLM(ModelConfig(vocab_size=13, d_model=64, n_layers=1, n_heads=2, attention="path"))
    torch.manual_seed(0)
    theirs = TransformerLM(ModelConfig(vocab_size=13, d_model=64, n_layers=1, n_heads=2, attention="path",
                                       attention_options={"w_conv_init_std": 0.02}))  # fmt: skip
    weight = default.blocks[0].attn.w_conv.weight
    assert weight.abs().max() <= 3**-0.5 and 0.25 < weight.std() < 0.4
    assert 0.015 < theirs.blocks[0].attn.w_conv.weight.std() < 0.025
