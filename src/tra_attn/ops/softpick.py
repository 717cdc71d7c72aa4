"""Softpick attention (Zuhri, Fuadi, Aji 2025, arXiv 2504.20966): a rectified, not sum-to-one softmax.

    s_ij  = scale * q_i . k_j                     (scale = 1 / sqrt(D)), for visible keys j (causal, own document)
    A_ij  = relu(e^s_ij - 1) / (sum_{l visible} |e^s_il - 1| + eps)
    out_i = sum_j A_ij v_j

Keys with s <= 0 get exact zeros yet still count in the denominator, so a row's weights sum to at most 1 and a
row whose scores are all <= 0 outputs exactly 0 (no attention sink is needed to attend to nothing). Computed in
the authors' numerically stable form (zaydzuhri/softpick-attention, ``naive_softpick_attn.py``, ``softpick``, at
commit c97f4dc5f9fcec2e8afc2932db2cba6d7d7e5465): with m_i the row's largest visible score,

    A_ij = relu(e^(s_ij - m_i) - e^(-m_i)) / (sum_l |e^(s_il - m_i) - e^(-m_i)| + eps),

eps added to the rescaled denominator as theirs. Their naive function adds 1e-8 and their FlashAttention kernel,
which their training configs select (``attn_impl: parallel_softpick_attn``), 1e-6 (``flash_softpick_attn.py``,
``b_acc += 1e-6``): ``eps`` is an argument, 1e-6 by the layer's default. One change: m_i is floored at 0, so
e^(-m_i) never overflows (a row of very negative scores). It changes nothing: a row with m_i < 0 drops every key,
its output and its gradient are exactly 0 in either form. Gradients flow through m_i as in their autograd
reference (d/dm_i = -(dO_i . out_i) eps / denominator_i, on the argmax key).

``softpick_naive`` materialises (B, H, Sq, Sk) (autograd throughout, logit dropout); ``softpick_chunked`` walks
blocks of query rows (ops/rows.py) with a hand-written backward that recomputes each block, O(S * block) memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .logit_dropout import check_impl
from .masks import compute_dtype
from .rows import block_keys, default_row_block, row_blocks, visible_keys


def softpick_parts(s: torch.Tensor, visible: torch.Tensor, eps: float):
    """The pieces of the stable form on scores s (..., Sq, Sk): e = e^(s - m) and u = e - e^(-m) on visible keys
    (0 elsewhere), the denominator sum |u| + eps (..., Sq, 1) and the floored row max m (..., Sq, 1)."""
    masked = torch.where(visible, s, float("-inf"))
    m = masked.amax(-1, keepdim=True).clamp_min(0.0)
    e = torch.exp(masked - m)  # 0 on hidden keys
    u = torch.where(visible, e - torch.exp(-m), 0.0)
    return e, u, u.abs().sum(-1, keepdim=True) + eps, m


def softpick_weights(s: torch.Tensor, visible: torch.Tensor, eps: float) -> torch.Tensor:
    """Softpick weights relu(u) / (sum |u| + eps) of scores s (..., Sq, Sk) over the visible keys (0 elsewhere)."""
    _, u, denominator, _ = softpick_parts(s, visible, eps)
    return F.relu(u) / denominator


def softpick_naive(q, k, v, scale=None, eps=1e-6, segment_ids=None, logit_dropout=0.0) -> torch.Tensor:
    """Materialised softpick attention (autograd throughout), accumulated in fp32 (fp64 for fp64 inputs).

    ``logit_dropout`` > 0 drops the scores s as every kind's logit dropout does (ops/logit_dropout.py): a dropped
    s is 0, so its key adds 0 to both the numerator and the denominator; kept ones are scaled by 1 / (1 - p)."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = visible_keys(q.shape[-2], k.shape[-2], segment_ids, q.device)
    s = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
    if logit_dropout:
        s = F.dropout(torch.where(visible, s, 0.0), logit_dropout, training=True)
    return (softpick_weights(s, visible, eps) @ v.to(cdt)).to(q.dtype)


class _ChunkedSoftpick(torch.autograd.Function):
    """Blocks of query rows against their whole causal key rows; the backward recomputes each block."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float, eps: float, block: int, segment_ids):
        sq, sk = q.shape[-2], k.shape[-2]
        out = torch.empty_like(q)
        for r0, r1 in row_blocks(sq, block):
            kp, visible = block_keys(sq, sk, r0, r1, segment_ids, q.device)
            s = scale * (q[..., r0:r1, :] @ k[..., :kp, :].transpose(-1, -2))
            out[..., r0:r1, :] = softpick_weights(s, visible, eps) @ v[..., :kp, :]
        ctx.save_for_backward(q, k, v, out)
        ctx.scale, ctx.eps, ctx.block, ctx.segment_ids = scale, eps, block, segment_ids
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with no_autocast(grad_out.device):
            return _ChunkedSoftpick._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        """With u_ij = e^(s_ij - m_i) - e^(-m_i), D_i = sum_j |u_ij| + eps, g_ij = dO_i . v_j, c_i = dO_i . out_i:
        ds_ij = e^(s_ij - m_i) (1[u_ij > 0] g_ij - sign(u_ij) c_i) / D_i on visible keys, plus, through the row
        max (du/dm = -u), dm_i = -c_i eps / D_i on the argmax key of a row whose max is above the floor."""
        q, k, v, out = ctx.saved_tensors
        sq, sk = q.shape[-2], k.shape[-2]
        scale = ctx.scale
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for r0, r1 in row_blocks(sq, ctx.block):
            kp, visible = block_keys(sq, sk, r0, r1, ctx.segment_ids, q.device)
            qb, kb, vb, gb = q[..., r0:r1, :], k[..., :kp, :], v[..., :kp, :], grad_out[..., r0:r1, :]
            s = scale * (qb @ kb.transpose(-1, -2))
            e, u, denominator, m = softpick_parts(s, visible, ctx.eps)
            c = (gb * out[..., r0:r1, :]).sum(-1, keepdim=True)
            g = gb @ vb.transpose(-1, -2)
            ds = e * (torch.where(u > 0, g, 0.0) - torch.sign(u) * c) / denominator
            masked = torch.where(visible, s, float("-inf"))
            top = masked.argmax(-1, keepdim=True)
            dm = torch.where(m > 0, -c * ctx.eps / denominator, 0.0)
            ds = ds.scatter_add(-1, top, dm)
            dq[..., r0:r1, :] = scale * (ds @ kb)
            dk[..., :kp, :] += scale * (ds.transpose(-1, -2) @ qb)
            dv[..., :kp, :] += (F.relu(u) / denominator).transpose(-1, -2) @ gb
        return dq, dk, dv, None, None, None, None


def softpick_chunked(q, k, v, scale=None, eps=1e-6, segment_ids=None, block_size=None) -> torch.Tensor:
    """Softpick attention in blocks of ``block_size`` query rows, O(S * block) memory: ``softpick_naive`` without
    logit dropout."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    block = int(block_size or default_row_block(q.shape[-2]))
    out = _ChunkedSoftpick.apply(q.to(cdt), k.to(cdt), v.to(cdt), float(scale), float(eps), block, segment_ids)
    return out.to(q.dtype)


def softpick_attention(
    q,
    k,
    v,
    *,
    scale: float | None = None,
    eps: float = 1e-6,
    impl: str = "auto",
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softpick attention for q (B, H, Sq, D), k/v (B, H, Sk, D), Sq <= Sk (queries are the last Sq keys).

    ``impl``: "naive", "chunked", or "auto" (chunked; naive under logit dropout, which needs the materialised
    scores). ``segment_ids`` (B, Sk) of the keys, -1 on padding, for packed or padded batches. Computes in fp32
    (fp64 for fp64 inputs), also under an enclosing autocast, and returns q's dtype.
    """
    check_impl("softpick_attention", impl, logit_dropout, "scores")
    with no_autocast(q.device):  # fp32 exponentials and sums under any enclosing autocast
        if impl == "naive" or logit_dropout:
            return softpick_naive(q, k, v, scale, eps, segment_ids, logit_dropout)
        return softpick_chunked(q, k, v, scale, eps, segment_ids)
