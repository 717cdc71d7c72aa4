"""Stick-breaking attention (Tan, Shen, Yang, Courville, Panda, ICLR 2025, arXiv 2410.17980).

    z_ij  = scale * q_i . k_j
    A_ij  = sigmoid(z_ij) * prod_{l visible, j < l} (1 - sigmoid(z_il))     for visible j, else 0
    out_i = sum_j A_ij v_j,     rem_i = 1 - sum_j A_ij   (not renormalised)

Key j is visible to query i iff j < i (the authors' default; j <= i with ``attend_current``), in the same
document and not padding. Going leftwards from the query, each key takes the fraction sigmoid(z) of the stick
that is left. No positional encoding: the order comes from the breaking itself. Computed in log space,

    log A_ij = logsigmoid(z_ij) + sum_{l visible, l > j} logsigmoid(-z_il),

a reverse cumulative sum like TRA's count, so fp32 stays finite at any length. The authors' reference is
``stickbreaking_attention/sb_ref.py`` (returns out and rem); ``remainder="value"`` adds rem_i * v_i, as their
tests do. ``stickbreaking_naive`` materialises (B, H, Sq, Sk); ``stickbreaking_chunked`` walks blocks of query
rows (ops/rows.py) with a hand-written backward, O(S * block) memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .logit_dropout import check_impl
from .masks import compute_dtype
from .rows import block_keys, default_row_block, row_blocks, visible_keys

REMAINDERS = ("none", "value")


def stickbreaking_log_weights(z: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """log A (-inf outside ``visible``) of logits z (..., Sq, Sk): logsigmoid(z_ij) plus the reverse cumulative
    sum of logsigmoid(-z_il) over the visible keys l right of j."""
    log_beta = torch.where(visible, F.logsigmoid(-z), 0.0)
    after = log_beta.flip(-1).cumsum(-1).flip(-1) - log_beta
    return torch.where(visible, F.logsigmoid(z) + after, float("-inf"))


def stickbreaking_naive(q, k, v, scale=None, attend_current=False, segment_ids=None, logit_dropout=0.0):
    """Materialised stick-breaking attention (autograd throughout): (out (B, H, Sq, D), rem (B, H, Sq)).

    ``logit_dropout`` > 0 drops the logits z as every kind's logit dropout does (ops/logit_dropout.py): a dropped
    z is 0 (sigmoid 1/2), kept ones are scaled by 1 / (1 - p)."""
    cdt = compute_dtype(q.dtype)
    sq, sk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = visible_keys(sq, sk, segment_ids, q.device, strict=not attend_current)
    z = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
    if logit_dropout:
        z = F.dropout(torch.where(visible, z, 0.0), logit_dropout, training=True)
    weights = stickbreaking_log_weights(z, visible).exp()
    return (weights @ v.to(cdt)).to(q.dtype), (1 - weights.sum(-1)).to(q.dtype)


class _ChunkedStickBreaking(torch.autograd.Function):
    """Blocks of query rows against their whole causal key rows; the backward recomputes each block."""

    @staticmethod
    def forward(ctx, q, k, v, scale: float, attend_current: bool, block: int, segment_ids):
        sq, sk = q.shape[-2], k.shape[-2]
        out, rem = torch.empty_like(q), q.new_empty(q.shape[:-1])
        for r0, r1 in row_blocks(sq, block):
            kp, visible = block_keys(sq, sk, r0, r1, segment_ids, q.device, strict=not attend_current)
            z = scale * (q[..., r0:r1, :] @ k[..., :kp, :].transpose(-1, -2))
            weights = stickbreaking_log_weights(z, visible).exp()
            out[..., r0:r1, :] = weights @ v[..., :kp, :]
            rem[..., r0:r1] = 1 - weights.sum(-1)
        ctx.save_for_backward(q, k, v)
        ctx.scale, ctx.attend_current, ctx.block, ctx.segment_ids = scale, attend_current, block, segment_ids
        return out, rem

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out, grad_rem):
        with no_autocast(grad_out.device):
            return _ChunkedStickBreaking._backward(ctx, grad_out, grad_rem)

    @staticmethod
    def _backward(ctx, grad_out, grad_rem):
        """With G_ij = A_ij (dO_i . v_j - dRem_i): dz_il = G_il sigmoid(-z_il) - sigmoid(z_il) sum_{j < l} G_ij
        on visible keys (log A_ij holds logsigmoid(z_ij) and logsigmoid(-z_il) for every visible l > j)."""
        q, k, v = ctx.saved_tensors
        sq, sk = q.shape[-2], k.shape[-2]
        scale = ctx.scale
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for r0, r1 in row_blocks(sq, ctx.block):
            kp, visible = block_keys(sq, sk, r0, r1, ctx.segment_ids, q.device, strict=not ctx.attend_current)
            qb, kb, vb, gb = q[..., r0:r1, :], k[..., :kp, :], v[..., :kp, :], grad_out[..., r0:r1, :]
            z = scale * (qb @ kb.transpose(-1, -2))
            weights = stickbreaking_log_weights(z, visible).exp()
            g = (gb @ vb.transpose(-1, -2) - grad_rem[..., r0:r1, None]) * weights
            before = g.cumsum(-1) - g  # sum over visible j < l (G is 0 elsewhere)
            dz = torch.where(visible, g * torch.sigmoid(-z) - torch.sigmoid(z) * before, 0.0)
            dq[..., r0:r1, :] = scale * (dz @ kb)
            dk[..., :kp, :] += scale * (dz.transpose(-1, -2) @ qb)
            dv[..., :kp, :] += weights.transpose(-1, -2) @ gb
        return dq, dk, dv, None, None, None, None


def stickbreaking_chunked(q, k, v, scale=None, attend_current=False, segment_ids=None, block_size=None):
    """Stick-breaking attention in blocks of ``block_size`` query rows, O(S * block) memory: (out, rem) as
    ``stickbreaking_naive`` (without logit dropout)."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    block = int(block_size or default_row_block(q.shape[-2]))
    out, rem = _ChunkedStickBreaking.apply(
        q.to(cdt), k.to(cdt), v.to(cdt), float(scale), bool(attend_current), block, segment_ids
    )
    return out.to(q.dtype), rem.to(q.dtype)


def stickbreaking_attention(
    q,
    k,
    v,
    *,
    scale: float | None = None,
    attend_current: bool = False,
    remainder: str = "none",
    impl: str = "auto",
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
    return_remainder: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Stick-breaking attention for q (B, H, Sq, D), k/v (B, H, Sk, D), Sq <= Sk (queries are the last Sq keys).

    ``remainder``: "none" (out = sum_j A_ij v_j) or "value" (plus rem_i * v_i). ``impl``: "naive", "chunked", or
    "auto" (chunked; naive under logit dropout, which needs the materialised logits). ``segment_ids`` (B, Sk) of
    the keys, -1 on padding, for packed or padded batches. Computes in fp32 (fp64 for fp64 inputs), also under an
    enclosing autocast, and returns q's dtype. ``return_remainder``: return (out, rem), rem (B, H, Sq) the stick
    left over, 1 - sum_j A_ij (the authors' layer adds rem_i times a learned per-head bias; layers/stickbreaking.py).
    """
    check_impl("stickbreaking_attention", impl, logit_dropout)
    if remainder not in REMAINDERS:
        raise ValueError(f"stickbreaking_attention: remainder = {remainder!r}; expected one of {REMAINDERS}")
    with no_autocast(q.device):  # fp32 logs and sums under any enclosing autocast
        if impl == "naive" or logit_dropout:
            out, rem = stickbreaking_naive(q, k, v, scale, attend_current, segment_ids, logit_dropout)
        else:
            out, rem = stickbreaking_chunked(q, k, v, scale, attend_current, segment_ids)
    if remainder == "value":
        out = out + rem[..., None] * v[..., k.shape[-2] - q.shape[-2] :, :]
    return (out, rem) if return_remainder else out
