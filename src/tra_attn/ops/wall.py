"""Wall attention: softmax attention with a learned per-channel multiplicative decay inside q . k (Tilde Research:
Timor Averbuch, Dhruv Pai, blog.tilderesearch.com/blog/wall-attn, 2026; code in fla-org/flash-linear-attention,
``fla/ops/wall_attn/naive.py`` and ``parallel.py`` at commit bc3b101dcb713ddc5bd8924b66754eb68b5ccf89).

    logits_ij = scale * sum_n q_in k_jn exp(P_in - P_jn) + (c_i - c_j)            for visible j <= i
    out_i     = sum_j exp(logits_ij) v_j / (sum_j exp(logits_ij) + exp(sink_h))

with P = cumsum(log a) over positions (inclusive; log a = logsigmoid(.) <= 0 per head and channel), so that
P_i - P_j = sum_{l=j+1..i} log a_l: the decay of the keys between j and i, query i's own gate included, key j's
not. The authors work in base 2 (P_2 = P / ln 2, exp2, logits times 1/ln 2): the same numbers; here everything
is in natural units. Optional, as in their op: c = cumsum of a scalar log forget gate per head (FoX's bias),
a per-head sink logit, and a window (key j visible iff i - j < window). The default scale is 1 / sqrt(D).

In a packed or padded batch the log gates are zeroed on padding and at each document's first token (as FoX's,
ops/fox.py), so P_i - P_j runs over the query's own document only, as the authors' varlen cumsum restarting
at each document's start gives, and padding adds no decay; keys of other documents are masked.

``wall_naive`` materialises (B, H, Sq, Sk, D) (autograd throughout; logit dropout). ``wall_chunked`` walks
blocks of query rows with a hand-written backward, O(S * block * D) memory. q_i exp(P_i) and k_j exp(-P_j)
factorise the decay, but exp(-P_j) overflows on long sequences; each block uses its first query's P as an
anchor R instead: for the keys before the block, q_i exp(P_i - R) and k_j exp(R - P_j) are both <= |q|, |k|
(P never increases), so neither overflows and one underflows only where the exact product does; the keys of the
block itself (the diagonal square) get exp(P_i - P_j) pair by pair. Both paths need log gates <= 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .logit_dropout import check_impl
from .masks import compute_dtype, masked_softmax, relative_distance
from .rows import row_blocks, visible_keys

DEFAULT_BLOCK = 32  # query rows per block: the diagonal square costs B * H * block^2 * D


def cumulative_decay(
    log_gate: torch.Tensor, segment_ids: torch.Tensor | None = None, past: torch.Tensor | None = None
) -> torch.Tensor:
    """P: the inclusive cumulative sum along axis 2 of the log gates (B, H, S) or (B, H, S, D) of the last S keys,
    in fp32 (fp64 for fp64 gates). ``segment_ids`` (B, Sk) of all keys: gates on padding and at a document's first
    token become 0. ``past`` (B, H[, D]): P of the key before them (a KV cache), which the sum continues."""
    gate = log_gate.to(compute_dtype(log_gate.dtype))
    if segment_ids is not None:
        continues = (segment_ids >= 0) & (segment_ids == F.pad(segment_ids[:, :-1], (1, 0), value=-1))
        keep = continues[:, None, segment_ids.shape[-1] - gate.shape[2] :]
        gate = gate.masked_fill(~(keep[..., None] if gate.dim() == 4 else keep), 0.0)
    if past is None:
        return gate.cumsum(2)
    return torch.cat([past.to(gate.dtype).unsqueeze(2), gate], 2).cumsum(2)[:, :, 1:]


def wall_visible(sq: int, sk: int, segment_ids: torch.Tensor | None, window: int, device) -> torch.Tensor:
    """(Sq, Sk) or (B, 1, Sq, Sk) bool: causal, in the query's document (``rows.visible_keys``) and, with a window
    > 0, i - j < window."""
    visible = visible_keys(sq, sk, segment_ids, device)
    return visible & (relative_distance(sq, sk, device) < window) if window else visible


def wall_weights(logits, visible, sink=None, logit_dropout: float = 0.0) -> torch.Tensor:
    """Softmax weights over the visible keys of ``logits`` (B, H, Sq, Sk), with a column for the sink logits
    ``sink`` (H,) appended when given (it takes mass, has no value). Logit dropout (ops/logit_dropout.py) drops the
    key logits, not the sink. Rows with no visible key get zero weights (with a sink: all on the sink)."""
    if logit_dropout:
        logits = F.dropout(torch.where(visible, logits, 0.0), logit_dropout, training=True)
    if sink is None:
        return masked_softmax(logits, visible)
    column = sink.to(logits.dtype)[:, None, None].expand(*logits.shape[:-1], 1)
    keep = torch.cat([visible.expand(logits.shape), torch.ones_like(column, dtype=torch.bool)], -1)
    return masked_softmax(torch.cat([logits, column], -1), keep)


def wall_naive(
    q, k, v, log_decay, scalar_decay=None, sink=None, scale=None, window=0, segment_ids=None, logit_dropout=0.0
):
    """Materialised Wall attention (autograd throughout) for q (B, H, Sq, D), k/v and P = ``log_decay``
    (B, H, Sk, D), ``scalar_decay`` c (B, H, Sk), ``sink`` (H,); computes in the dtype of q."""
    sq, sk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = wall_visible(sq, sk, segment_ids, window, q.device)
    p_q = log_decay[..., sk - sq :, :]
    diff = p_q[..., :, None, :] - log_decay[..., None, :, :]  # (B, H, Sq, Sk, D): <= 0 where visible
    decay = diff.masked_fill(~visible[..., None], float("-inf")).exp()
    logits = scale * (q[..., :, None, :] * k[..., None, :, :] * decay).sum(-1)
    if scalar_decay is not None:
        logits = logits + (scalar_decay[..., sk - sq :, None] - scalar_decay[..., None, :])
    weights = wall_weights(logits, visible, sink, logit_dropout)
    return weights[..., :sk] @ v


def _block_logits(q, k, P, c, scale, window, segment_ids, r0, r1):
    """The logits (B, H, r1 - r0, kp - k0) of query rows [r0, r1) against keys [k0, kp), their visibility, and
    the pieces the backward reuses: the anchored q and off-diagonal k, their factors and the diagonal decay."""
    sq, sk = q.shape[-2], k.shape[-2]
    a, kp = sk - sq + r0, sk - sq + r1  # the block's first query position; keys up to its last
    k0 = max(0, a - window + 1) if window else 0
    seg = None if segment_ids is None else segment_ids[:, :kp]
    visible = wall_visible(r1 - r0, kp, seg, window, q.device)[..., k0:]
    qb, p_q, anchor = q[..., r0:r1, :], P[..., a:kp, :], P[..., a : a + 1, :]
    q_factor, k_factor = (p_q - anchor).exp(), (anchor - P[..., k0:a, :]).exp()  # both <= 1
    q_anchored, k_anchored = qb * q_factor, k[..., k0:a, :] * k_factor
    lower = torch.ones(r1 - r0, r1 - r0, dtype=torch.bool, device=q.device).tril()
    diag_decay = (p_q[..., :, None, :] - p_q[..., None, :, :]).masked_fill(~lower[..., None], float("-inf")).exp()
    off = q_anchored @ k_anchored.transpose(-1, -2)
    diag = (qb[..., :, None, :] * k[..., None, a:kp, :] * diag_decay).sum(-1)
    logits = scale * torch.cat([off, diag], -1)
    if c is not None:
        logits = logits + (c[..., a:kp, None] - c[..., None, k0:kp])
    return logits, visible, (a, kp, k0, q_factor, k_factor, q_anchored, k_anchored, diag_decay)


class _ChunkedWall(torch.autograd.Function):
    """Blocks of query rows against their visible keys; the backward recomputes each block's weights."""

    @staticmethod
    def forward(ctx, q, k, v, P, c, sink, scale: float, window: int, block: int, segment_ids):
        out = torch.empty_like(q)
        for r0, r1 in row_blocks(q.shape[-2], block):
            logits, visible, (_, kp, k0, *_) = _block_logits(q, k, P, c, scale, window, segment_ids, r0, r1)
            out[..., r0:r1, :] = wall_weights(logits, visible, sink)[..., : kp - k0] @ v[..., k0:kp, :]
        ctx.save_for_backward(q, k, v, P, c, sink, out)
        ctx.scale, ctx.window, ctx.block, ctx.segment_ids = scale, window, block, segment_ids
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with no_autocast(grad_out.device):
            return _ChunkedWall._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        """dS_ij = w_ij (dO_i . v_j - dO_i . o_i); the logits depend on P only through P_i - P_j, with
        d logits_ij / d P_in = q_in d logits_ij / d q_in and d / d P_jn = -k_jn d / d k_jn, so dP = q dq - k dk
        (the query term at the query positions). The sink: d sink_h = -sum_i w_i,sink dO_i . o_i."""
        q, k, v, P, c, sink, out = ctx.saved_tensors
        sq, sk = q.shape[-2], k.shape[-2]
        scale = ctx.scale
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dc = None if c is None else torch.zeros_like(c)
        dsink = None if sink is None else torch.zeros_like(sink)
        for r0, r1 in row_blocks(sq, ctx.block):
            logits, visible, pieces = _block_logits(q, k, P, c, scale, ctx.window, ctx.segment_ids, r0, r1)
            a, kp, k0, q_factor, k_factor, q_anchored, k_anchored, diag_decay = pieces
            weights = wall_weights(logits, visible, sink)
            gb = grad_out[..., r0:r1, :]
            delta = (gb * out[..., r0:r1, :]).sum(-1, keepdim=True)
            if sink is not None:
                dsink -= (weights[..., -1:] * delta).sum((0, 2, 3))
                weights = weights[..., : kp - k0]
            dv[..., k0:kp, :] += weights.transpose(-1, -2) @ gb
            ds = weights * (gb @ v[..., k0:kp, :].transpose(-1, -2) - delta)
            if dc is not None:
                dc[..., a:kp] += ds.sum(-1)
                dc[..., k0:kp] -= ds.sum(-2)
            ds = scale * ds
            ds_off, ds_diag = ds[..., : a - k0], ds[..., a - k0 :]
            qb = q[..., r0:r1, :]
            dq[..., r0:r1, :] = (ds_off @ k_anchored) * q_factor + (
                ds_diag[..., None] * k[..., None, a:kp, :] * diag_decay
            ).sum(-2)
            dk[..., k0:a, :] += (ds_off.transpose(-1, -2) @ q_anchored) * k_factor
            dk[..., a:kp, :] += (ds_diag[..., None] * qb[..., :, None, :] * diag_decay).sum(-3)
        dP = -k * dk
        dP[..., sk - sq :, :] += q * dq
        return dq, dk, dv, dP, dc, dsink, None, None, None, None


def wall_chunked(
    q, k, v, log_decay, scalar_decay=None, sink=None, scale=None, window=0, segment_ids=None, block_size=None
):
    """Wall attention in blocks of ``block_size`` query rows (default 32), O(S * block * D) memory: what
    ``wall_naive`` computes (without logit dropout), in fp32 (fp64 for fp64 inputs), also under an enclosing
    autocast; returns q's dtype."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    block = int(block_size or min(DEFAULT_BLOCK, max(q.shape[-2], 1)))
    c = None if scalar_decay is None else scalar_decay.to(cdt)
    s = None if sink is None else sink.to(cdt)
    with no_autocast(q.device):
        out = _ChunkedWall.apply(
            q.to(cdt), k.to(cdt), v.to(cdt), log_decay.to(cdt), c, s, float(scale), int(window), block, segment_ids
        )
    return out.to(q.dtype)


def wall_attention(
    q,
    k,
    v,
    log_decay: torch.Tensor,
    *,
    scalar_decay: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
    scale: float | None = None,
    window: int = 0,
    impl: str = "auto",
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Wall attention for q (B, H, Sq, D), k/v (B, H, Sk, D), Sq <= Sk (queries are the last Sq keys).

    ``log_decay``: P (B, H, Sk, D) of every key, ``cumulative_decay`` of log gates <= 0; ``scalar_decay``: c
    (B, H, Sk) likewise, or None; ``sink`` (H,) logits, or None; ``window`` 0: none. ``impl``: "naive", "chunked", or
    "auto" (chunked; naive under logit dropout, which needs the materialised logits). ``segment_ids`` (B, Sk) of the
    keys, -1 on padding. Computes in fp32 (fp64 for fp64 inputs), also under an enclosing autocast; returns q's
    dtype.
    """
    check_impl("wall_attention", impl, logit_dropout)
    if log_decay.shape[-2:] != k.shape[-2:]:
        raise ValueError(
            f"wall_attention: log_decay.shape = {tuple(log_decay.shape)}; expected (B, H, Sk, D) = "
            f"(..., {k.shape[-2]}, {k.shape[-1]}), one per key and channel"
        )
    with no_autocast(q.device):
        if impl == "naive" or logit_dropout:
            cdt = compute_dtype(q.dtype)
            cast = [None if t is None else t.to(cdt) for t in (q, k, v, log_decay, scalar_decay, sink)]
            return wall_naive(*cast, scale, window, segment_ids, logit_dropout).to(q.dtype)
        return wall_chunked(q, k, v, log_decay, scalar_decay, sink, scale, window, segment_ids)
