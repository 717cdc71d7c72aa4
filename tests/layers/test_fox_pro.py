"""FoX (Pro): the authors' layer (its Pro pieces ported below) against ours in fp64, forward and backward, with left
padding and through their shift-state decoding; the token shift at document starts; cached and packed forwards
equal the full one and each document alone; bad options."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tra_attn import ModelConfig
from tra_attn.layers import FoXProAttention
from tra_attn.layers.cache import LayerCache
from tra_attn.ops.fox import token_shift

COMMIT = "883f260c636e87971339749b0d8310004794a5cc"  # zhixuan-lin/forgetting-transformer
D_MODEL, HEADS = 32, 4


def authors_group_norm_ref(x, weight, bias, num_groups, eps=1e-5, is_rms_norm=False):
    """Ported from zhixuan-lin/forgetting-transformer, src/forgetting_transformer/model/forgetting_transformer/
    layernorm.py at commit 883f260c636e87971339749b0d8310004794a5cc: ``group_norm_ref`` (the reference of the
    ``GroupNorm`` their q_norm and k_norm are). Verbatim except that the unused residual, prenorm and upcast
    arguments are left out and einops' rearrange is written with view."""
    dtype = x.dtype
    shape = x.shape
    x, weight = (data.reshape(*data.shape[:-1], num_groups, -1) for data in (x, weight))
    if bias is not None:
        bias = bias.reshape(num_groups, -1)
    if not is_rms_norm:
        mean = x.mean(dim=-1, keepdim=True)
        x = x - mean
    rstd = 1 / torch.sqrt((x.square()).mean(dim=-1, keepdim=True) + eps)
    out = (x * rstd * weight) + bias if bias is not None else (x * rstd * weight)
    out = out.reshape(shape)
    out = out.to(dtype)
    return out


def authors_group_norm_gated_ref(x, g, weight, bias, num_groups, eps=1e-5, is_rms_norm=False):
    """``group_norm_gated_ref`` of fuse_norm_gate.py in the same folder and commit (the reference of the
    ``FusedGroupNormGated`` their output_norm is, with ``activation="sigmoid"``): the group norm, then times
    sigmoid(g). Verbatim except as ``authors_group_norm_ref``."""
    dtype = x.dtype
    shape = x.shape
    x, weight = (data.reshape(*data.shape[:-1], num_groups, -1) for data in (x, weight))
    if bias is not None:
        bias = bias.reshape(num_groups, -1)
    if not is_rms_norm:
        mean = x.mean(dim=-1, keepdim=True)
        x = x - mean
    rstd = 1 / torch.sqrt((x.square()).mean(dim=-1, keepdim=True) + eps)
    out = (x * rstd * weight) + bias if bias is not None else (x * rstd * weight)
    out = out.reshape(shape)
    out = out * F.sigmoid(g)
    out = out.to(dtype)
    return out


def authors_token_shift(x, prev_weight, curr_weight):
    """The PyTorch reference the authors test their Triton ``token_shift`` against (``test_op`` of token_shift.py
    in the same folder and commit): x (B, T, H, D), the previous token 0 at t = 0."""
    x_prev = torch.roll(x, shifts=1, dims=1)
    x_prev[:, 0, :, :] = 0.0
    return x_prev * prev_weight[..., None] + x * curr_weight[..., None]


def weight_sum(x, y, alpha):
    """``weight_sum`` of modeling_forgetting_transformer.py (same commit), without its torch.jit.script."""
    out = alpha * x + (1.0 - alpha) * y
    out = out.to(x.dtype)
    return out


class ShiftLinear(nn.Module):
    """Ported from modeling_forgetting_transformer.py (same commit): ``ShiftLinear``, the Pro layer's k_proj and
    v_proj. Verbatim except: the Triton ``token_shift`` is its test's reference (``authors_token_shift``), alpha
    keeps the input's dtype (the original casts it to fp32), and einops' rearrange is written with view."""

    def __init__(self, input_dim, output_dim, num_heads, bias, shift_bias=False):
        super().__init__()
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.num_heads = num_heads
        assert self.output_dim % self.num_heads == 0
        self.linear = nn.Linear(input_dim, output_dim, bias=bias)
        self.shift_proj = nn.Linear(input_dim, num_heads, bias=shift_bias)

    def forward(self, x, shift_state, attention_mask=None):
        assert x.ndim == 3, "Input must be (B, T, D)"
        B, T, D = x.size()
        out = self.linear(x)
        # (B, T, H, 1)
        alpha = torch.sigmoid(self.shift_proj(x))
        out_per_head = out.view(B, T, self.num_heads, -1)
        if T > 1:
            if attention_mask is not None:
                out_per_head = torch.where(attention_mask[:, :, None, None].bool(), out_per_head, 0.0)
            # TODO: note in this case cache is not used
            result_per_head = authors_token_shift(out_per_head, alpha, 1.0 - alpha)
        else:
            shift_state_per_head = shift_state.view(B, 1, self.num_heads, -1)
            result_per_head = weight_sum(shift_state_per_head, out_per_head, alpha[..., None])
        result_per_head = result_per_head.to(out.dtype)
        if shift_state is not None:
            shift_state.copy_(out[:, -1, :])
        return result_per_head.reshape(B, T, -1)


def authors_kernel_attention(q, k, v, log_fgate, seq_start, sm_scale):
    """What the authors' Triton ``forgetting_attention`` (src/forgetting_transformer/ops/forgetting_attention.py,
    same commit) computes, materialised: its forward's handling of ``seq_start`` verbatim (gates before it zeroed,
    then the cumulative sum; the kernel masks keys before it), queries at the last M of N positions. The cumulative
    sum keeps the gates' dtype (the original's is fp32)."""
    B, H, M, D = q.shape
    N = k.shape[-2]
    if seq_start is not None:
        log_fgate = log_fgate.clone()
        mask_index = torch.arange(N, device=q.device)[None, None, :] < seq_start[:, None, None]
        mask_index = torch.broadcast_to(mask_index, log_fgate.size())
        log_fgate[mask_index] = 0.0
    log_lambda = torch.cumsum(log_fgate.to(q.dtype), dim=-1)
    s = q @ k.transpose(-1, -2) * sm_scale + log_lambda[..., N - M :, None] - log_lambda[..., None, :]
    visible = torch.ones(M, N, dtype=torch.bool).tril(N - M)
    if seq_start is not None:
        visible = visible & (torch.arange(N)[None, None, None, :] >= seq_start[:, None, None, None])
    return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1) @ v


class AuthorsProLayer(nn.Module):
    """``ForgettingAttentionLayer`` of modeling_forgetting_transformer.py (same commit) with the Pro flags
    (use_k_shift, use_v_shift, qk_norm, use_output_gate, use_output_norm; fgate_type "full"; no RoPE, no ACP):
    its modules and the Pro branches of its ``forward``. Verbatim except: the norms are their references above
    (weights of (hidden_size,), epsilons 1e-5 for q/k, the layer's norm_eps 1e-6 for the output), the kernel is
    ``authors_kernel_attention``, the cache is a dict (their FgateDynamicCache's concatenation and shift states),
    einops is written with view/transpose, and o_proj has a bias (it is ours, loaded with the rest)."""

    def __init__(self, hidden_size, num_heads, norm_eps=1e-6):
        super().__init__()
        self.num_heads, self.hidden_size, self.head_dim = num_heads, hidden_size, hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = ShiftLinear(hidden_size, hidden_size, num_heads, bias=False)
        self.v_proj = ShiftLinear(hidden_size, hidden_size, num_heads, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=True)
        self.fgate_proj = nn.Linear(hidden_size, num_heads, bias=True)
        self.ogate_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.output_norm_weight = nn.Parameter(torch.ones(hidden_size))
        self.q_norm_weight = nn.Parameter(torch.ones(hidden_size))
        self.k_norm_weight = nn.Parameter(torch.ones(hidden_size))
        self.norm_eps = norm_eps

    def load_ours(self, ours: FoXProAttention) -> AuthorsProLayer:
        """Our layer's weights under the authors' names (and dtype)."""
        self.to(ours.q_proj.weight.dtype)
        with torch.no_grad():
            for theirs, mine in [
                (self.q_proj, ours.q_proj),
                (self.k_proj.linear, ours.k_proj),
                (self.k_proj.shift_proj, ours.k_shift_proj),
                (self.v_proj.linear, ours.v_proj),
                (self.v_proj.shift_proj, ours.v_shift_proj),
                (self.o_proj, ours.o_proj),
                (self.fgate_proj, ours.fgate_proj),
                (self.ogate_proj, ours.ogate_proj),
            ]:
                theirs.load_state_dict(mine.state_dict())
            for theirs, mine in [("output_norm", ours.o_norm), ("q_norm", ours.q_norm), ("k_norm", ours.k_norm)]:
                getattr(self, f"{theirs}_weight").copy_(mine.weight.flatten())
        return self

    def forward(self, hidden_states, attention_mask=None, past_key_values=None):
        batch_size, q_len, _ = hidden_states.size()
        if past_key_values is not None:
            key_shift_state = past_key_values["key_shift"]
            value_shift_state = past_key_values["value_shift"]
        else:
            key_shift_state = value_shift_state = None
        q = self.q_proj(hidden_states)
        k = self.k_proj(hidden_states, key_shift_state, attention_mask=attention_mask)
        v = self.v_proj(hidden_states, value_shift_state, attention_mask=attention_mask)
        q = authors_group_norm_ref(q, self.q_norm_weight, None, self.num_heads, is_rms_norm=True).to(q.dtype)
        k = authors_group_norm_ref(k, self.k_norm_weight, None, self.num_heads, is_rms_norm=True).to(k.dtype)
        q, k, v = (t.view(batch_size, q_len, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        fgate_logit = self.fgate_proj(hidden_states).transpose(1, 2)
        log_fgate = torch.nn.functional.logsigmoid(fgate_logit.float())
        if past_key_values is not None:
            for name, new, dim in (("k", k, -2), ("v", v, -2), ("log_fgate", log_fgate, -1)):
                old = past_key_values.get(name)
                past_key_values[name] = new if old is None else torch.cat([old, new], dim=dim)
            k, v, log_fgate = past_key_values["k"], past_key_values["v"], past_key_values["log_fgate"]
        seq_start = None
        if attention_mask is not None:
            B, _, T = log_fgate.size()
            assert attention_mask.size() == (B, T), ((B, T), attention_mask.size())
            seq_start = T - attention_mask.sum(dim=-1)
        o = authors_kernel_attention(q, k, v, log_fgate, seq_start, 1 / math.sqrt(self.head_dim))
        o = o.transpose(1, 2).reshape(batch_size, q_len, self.hidden_size)
        o = authors_group_norm_gated_ref(
            o, self.ogate_proj(hidden_states), self.output_norm_weight, None, self.num_heads, self.norm_eps, True
        )
        return self.o_proj(o)


def our_layer(seed=0) -> FoXProAttention:
    """Our layer in fp64 with every weight away from its initial value (norm weights, gate biases)."""
    torch.manual_seed(seed)
    layer = FoXProAttention(D_MODEL, HEADS, gate_bias_init=2.0).double()
    with torch.no_grad():
        for norm in (layer.q_norm, layer.k_norm, layer.o_norm):
            norm.weight.uniform_(0.5, 1.5)
        for proj in (layer.k_shift_proj, layer.v_shift_proj):
            proj.weight.mul_(4)  # mixes spread over (0, 1)
        layer.fgate_proj.bias.normal_(2.0, 1.0)
    return layer


def x_of(b=2, s=11, seed=1):
    return torch.randn(b, s, D_MODEL, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_the_layer_equals_the_authors_pro_layer_forward_and_backward_in_fp64():
    ours = our_layer()
    theirs = AuthorsProLayer(D_MODEL, HEADS).load_ours(ours)
    x = x_of().requires_grad_()
    out, ref = ours(x), theirs(x)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    mine = torch.autograd.grad(out, [x, *ours.parameters()], go)
    named = dict(theirs.named_parameters())
    names = ["q_proj.weight", "k_proj.linear.weight", "v_proj.linear.weight", "o_proj.weight", "o_proj.bias"]
    names += ["fgate_proj.weight", "fgate_proj.bias", "k_proj.shift_proj.weight", "v_proj.shift_proj.weight"]
    names += ["ogate_proj.weight", "q_norm_weight", "k_norm_weight", "output_norm_weight"]
    expected = torch.autograd.grad(ref, [x, *(named[n] for n in names)], go)
    assert [p.numel() for p in ours.parameters()] == [named[n].numel() for n in names]  # the same order
    for a, b in zip(mine, expected):
        torch.testing.assert_close(a.flatten(), b.flatten(), atol=1e-11, rtol=1e-11)


def test_left_padding_equals_the_authors_attention_mask_path():
    """Their mask zeroes padding's projections before the shift and starts the gates and keys at seq_start."""
    ours = our_layer(3)
    theirs = AuthorsProLayer(D_MODEL, HEADS).load_ours(ours)
    x = x_of(3, 9)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, :4], mask[1, :1] = 0, 0
    seg = torch.where(mask.bool(), 0, -1).to(torch.int32)
    real = mask.bool()
    torch.testing.assert_close(ours(x, segment_ids=seg)[real], theirs(x, attention_mask=mask)[real], atol=1e-12, rtol=0)
    alone = ours(x[:1, 4:])[0]  # and a padded row is the document alone
    torch.testing.assert_close(ours(x, segment_ids=seg)[0, 4:], alone, atol=1e-12, rtol=0)


def test_decoding_equals_the_authors_shift_state_decoding_and_our_full_forward():
    """Their decoding keeps the previous token's projections (the shift states); our cache keeps every key's."""
    ours = our_layer(4).eval()
    theirs = AuthorsProLayer(D_MODEL, HEADS).load_ours(ours).eval()
    x = x_of(2, 10, seed=5)
    state = {"key_shift": x.new_zeros(2, D_MODEL), "value_shift": x.new_zeros(2, D_MODEL)}
    cache = LayerCache()
    with torch.no_grad():
        mine = [ours(x[:, :6], cache=cache)] + [ours(x[:, t : t + 1], cache=cache) for t in range(6, 10)]
        ref = [theirs(x[:, :6], past_key_values=state)]
        ref += [theirs(x[:, t : t + 1], past_key_values=state) for t in range(6, 10)]
        full = ours(x)
    torch.testing.assert_close(torch.cat(mine, 1), torch.cat(ref, 1), atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.cat(mine, 1), full, atol=1e-12, rtol=0)
    assert cache.length == 10 and sorted(cache.extras) == ["k_mix", "log_fgate", "v_mix"]


def test_a_packed_batch_prefilled_in_chunks_computes_each_document_alone():
    """Documents 3 + 5 + 4 in one row, right padding in the other; chunks cut inside a document and at a start."""
    ours = our_layer(6).eval()
    x = x_of(2, 12, seed=7)
    seg = torch.tensor([[0] * 3 + [1] * 5 + [2] * 4, [5] * 7 + [-1] * 5], dtype=torch.int32)
    with torch.no_grad():
        full = ours(x, segment_ids=seg)
        cache = LayerCache()
        parts = [ours(x[:, a:b], cache=cache, segment_ids=seg[:, :b]) for a, b in ((0, 3), (3, 5), (5, 12))]
        torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-12, rtol=0)
        for row, a, b in ((0, 0, 3), (0, 3, 8), (0, 8, 12), (1, 0, 7)):
            torch.testing.assert_close(full[row, a:b], ours(x[row : row + 1, a:b])[0], atol=1e-12, rtol=0)


def test_the_token_shift_starts_from_zero_at_every_document_and_after_padding():
    z = torch.randn(1, 2, 7, 3, dtype=torch.float64)
    mix = torch.rand(1, 2, 7, dtype=torch.float64)
    seg = torch.tensor([[-1, 0, 0, 1, 1, 1, -1]], dtype=torch.int32)
    out = token_shift(z, mix, seg)
    a = mix[..., None]
    starts = [0, 1, 3, 6]  # padding, document 0's first token, document 1's, padding
    torch.testing.assert_close(out[:, :, starts], ((1 - a) * z)[:, :, starts], atol=0, rtol=0)
    torch.testing.assert_close(out[:, :, [2, 4, 5]], ((1 - a) * z + a * z.roll(1, 2))[:, :, [2, 4, 5]])
    torch.testing.assert_close(token_shift(z, mix), ((1 - a) * z + a * F.pad(z, (0, 0, 1, -1))))


def test_the_options_are_checked_and_the_gate_bias_is_set():
    layer = FoXProAttention(d_model=32, n_heads=4, gate_bias_init=-1.0, qk_norm_eps=1e-3)
    assert (layer.fgate_proj.bias == -1.0).all() and layer.q_norm.eps == 1e-3 and layer.o_norm.eps == 1e-6
    assert layer(torch.randn(1, 5, 32)).shape == (1, 5, 32)
    with pytest.raises(ValueError, match=r"FoXProOptions\.qk_norm_eps = 0\.0; expected a finite positive number"):
        ModelConfig(attention="fox_pro", attention_options={"qk_norm_eps": 0.0})
