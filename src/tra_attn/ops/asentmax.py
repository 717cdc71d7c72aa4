"""alpha-entmax attention with ASEntmax's length scaling (Vasylenko, Pitorro, Martins, Treviso 2025, arXiv
2506.16640; entmax: Peters, Niculae, Martins 2019, arXiv 1905.05702).

    p_ij  = [(alpha - 1) z_ij - tau_i]_+ ^ (1 / (alpha - 1)),  tau_i such that sum_{j visible} p_ij = 1
    z_ij  = scale * theta_i q_i . k_j,     out_i = sum_j p_ij v_j
    theta_i = 1 + softplus(w_b . x_i + b_b) * log(n_i + 1) ^ (2 tanh(w_g . x_i + b_g))   (per head)

Keys below the threshold tau_i get exactly 0. For alpha 1.5 (ASEntmax's) and 2 (sparsemax) tau is exact, from one
sort of the row as the authors' ``entmax15`` and ``sparsemax`` (``entmax/activations.py``): about twice as fast on a
CPU as bisection. Any other alpha finds tau by bisection as their ``entmax_bisect`` (``entmax/root_finding.py``),
rows shifted by their maximum and the bracket sized by the row's visible keys. Both normalise at the end (rows sum
to 1); the backward is entmax's Jacobian. theta_i is the authors' "adapt-softplus-tanh" scale (``asentmax``
repository), with n_i the keys query i sees (``rows.key_counts``).

NAPE (the authors' models' positions): fixed per-head ALiBi ``slopes`` m_h (0 on NoPE heads) add -m_h (p_i - p_j) to
z_ij before entmax, p the positions in the query's document (``masks.document_positions``; the layer, with its head
split, is layers/asentmax.py).

No cheap key-block (streaming) path: tau_i needs the whole row (sorted, or at every bisection step), so streaming
over key blocks would recompute every score many times. Rows are independent, though: ``entmax_chunked`` walks
blocks of query rows against their whole key rows (O(S * block) memory, the backward reuses the saved tau).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .logit_dropout import check_impl
from .masks import compute_dtype, document_positions
from .rows import block_keys, default_row_block, row_blocks, visible_keys


def bisection_steps(dtype: torch.dtype) -> int:
    """Bisection steps: the bracket [-1, 0] halves to below the dtype's resolution (entmax's default, 50, in fp64)."""
    return 50 if dtype == torch.float64 else 30


EXACT_ALPHAS = (1.5, 2.0)  # closed-form thresholds after a sort; any other alpha bisects


def _bisected_threshold(x: torch.Tensor, alpha: float, steps: int) -> torch.Tensor:
    """tau (..., 1) of rows x = (alpha - 1)(z - max) (-inf outside the visible keys) by bisection: the midpoint of
    the last step, the bracket [-1, -(1/n)^(alpha-1)] sized by the row's n visible keys."""
    n = (x > float("-inf")).sum(-1, keepdim=True).clamp(min=1).to(x.dtype)
    tau_lo = torch.full_like(n, -1.0)  # p_max = 1: sum >= 1
    step = 1 - n ** (1 - alpha)  # tau_hi = -(1/n)^(alpha-1): every p <= 1/n, sum <= 1
    for _ in range(steps):
        step = step / 2
        tau = tau_lo + step
        p = torch.clamp(x - tau, min=0) ** (1 / (alpha - 1))
        tau_lo = torch.where(p.sum(-1, keepdim=True) >= 1, tau, tau_lo)
    return tau


def _sorted_threshold(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """The exact tau (..., 1) of rows x as ``_bisected_threshold``'s, for alpha 1.5 or 2: sort each row, take for
    every support size k the tau that makes the k largest entries sum to 1, keep the largest k whose k-th entry
    stays above its tau (the authors' full-sort entmax15 and sparsemax)."""
    xs = torch.sort(x, dim=-1, descending=True).values
    visible = xs > float("-inf")
    xs0 = torch.where(visible, xs, 0.0)  # padding adds nothing to the cumulative sums
    rho = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    total = xs0.cumsum(-1)
    if alpha == 2.0:  # sparsemax: sum_{j<=k} (x_j - tau) = 1
        tau = (total - 1) / rho
    else:  # 1.5-entmax: sum_{j<=k} (x_j - tau)^2 = 1, the smaller root
        mean = total / rho
        delta = (1 - ((xs0 * xs0).cumsum(-1) - rho * mean * mean)) / rho
        tau = mean - torch.sqrt(torch.clamp(delta, min=0))
    support = ((tau <= xs) & visible).sum(-1, keepdim=True).clamp(min=1)
    return tau.gather(-1, support - 1)


def _threshold(z: torch.Tensor, alpha: float, steps: int, exact: bool = True):
    """alpha-entmax of z (..., n), -inf outside the visible keys: (p, tau, norm), tau and norm (..., 1) with
    p = [x - tau]_+^(1/(alpha-1)) / norm, x = (alpha - 1)(z - max); a row with no key gives p = 0. tau is exact for
    alpha in ``EXACT_ALPHAS`` (unless ``exact`` is False), found by ``steps`` bisection steps otherwise."""
    top = z.amax(-1, keepdim=True)
    has_key = top > float("-inf")
    x = (z - torch.where(has_key, top, 0.0)) * (alpha - 1)
    exact = exact and alpha in EXACT_ALPHAS
    tau = _sorted_threshold(x, alpha) if exact else _bisected_threshold(x, alpha, steps)
    p = torch.clamp(x - tau, min=0) ** (1 / (alpha - 1))
    norm = torch.where(has_key, p.sum(-1, keepdim=True), 1.0)
    return p / norm, tau, norm


def _entmax_grad(p: torch.Tensor, grad: torch.Tensor, alpha: float) -> torch.Tensor:
    """d loss / d z from d loss / d p (entmax's Jacobian): with s = p^(2 - alpha) on the support,
    dz = s (g - <s, g> / sum s)."""
    s = torch.where(p > 0, p ** (2 - alpha), 0.0)
    total = s.sum(-1, keepdim=True)
    mean = (s * grad).sum(-1, keepdim=True) / torch.where(total > 0, total, 1.0)
    return s * (grad - mean)


class Entmax(torch.autograd.Function):
    """alpha-entmax over the last dimension (-inf entries get 0): exact after a sort, or by bisection."""

    @staticmethod
    def forward(ctx, z, alpha: float, steps: int):
        p, _, _ = _threshold(z, alpha, steps)
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        return _entmax_grad(p, grad, ctx.alpha), None, None


def entmax(z: torch.Tensor, alpha: float = 1.5, steps: int | None = None) -> torch.Tensor:
    """alpha-entmax (alpha in (1, 2]) over the last dimension of z; -inf entries, and rows of only -inf, get 0.
    ``steps``: bisection steps for an alpha outside ``EXACT_ALPHAS`` (default by dtype)."""
    return Entmax.apply(z, float(alpha), steps or bisection_steps(z.dtype))


def asentmax_query_scale(beta_logit: torch.Tensor, gamma_logit: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """theta = 1 + softplus(beta_logit) * log(n + 1) ^ (2 tanh(gamma_logit)) for (B, Sq, H) projections of x and key
    counts n (B or 1, Sq): (B, H, Sq). log(n + 1) >= log 2 > 0 (the authors' offset), so every power is finite."""
    log_n = torch.log(n.to(beta_logit.dtype) + 1)[..., None]
    return (1 + F.softplus(beta_logit) * log_n ** (2 * torch.tanh(gamma_logit))).transpose(1, 2)


def key_positions(sk: int, segment_ids: torch.Tensor | None, device) -> torch.Tensor:
    """(1 or B, Sk) int64 positions of the keys: 0, 1, ... in one document, else in each key's document."""
    return torch.arange(sk, device=device)[None] if segment_ids is None else document_positions(segment_ids)


def alibi_logit_bias(slopes: torch.Tensor, positions: torch.Tensor, q0: int, q1: int, kp: int) -> torch.Tensor:
    """(1 or B, H, q1 - q0, kp) bias -m_h (p_i - p_j) of queries at key positions [q0, q1) and keys [0, kp), from
    per-head ``slopes`` (H,) and key ``positions`` (``key_positions``); finite everywhere (masking is the caller's)."""
    dist = positions[:, q0:q1, None] - positions[:, None, :kp]
    return -slopes[None, :, None, None] * dist[:, None].to(slopes.dtype)


def entmax_naive(
    q, k, v, alpha: float, scale=None, segment_ids=None, logit_dropout: float = 0.0, slopes=None
) -> torch.Tensor:
    """Materialised alpha-entmax attention (autograd, with ``Entmax``); optional ALiBi ``slopes`` (H,) and logit
    dropout (of z with its bias: dropped logits become 0, kept ones are scaled by 1 / (1 - p), as
    ops/logit_dropout.py)."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    sq, sk = q.shape[-2], k.shape[-2]
    visible = visible_keys(sq, sk, segment_ids, q.device)
    z = scale * (q.to(cdt) @ k.to(cdt).transpose(-1, -2))
    if slopes is not None:
        z = z + alibi_logit_bias(slopes.to(cdt), key_positions(sk, segment_ids, q.device), sk - sq, sk, sk)
    if logit_dropout:
        z = F.dropout(torch.where(visible, z, 0.0), logit_dropout, training=True)
    p = entmax(torch.where(visible, z, float("-inf")), alpha)
    return (p @ v.to(cdt)).to(q.dtype)


class _ChunkedEntmax(torch.autograd.Function):
    """Blocks of query rows against their whole causal key rows; the backward recomputes each block's weights from
    the saved threshold and normaliser (no second threshold search)."""

    @staticmethod
    def _logits(qb, kb, scale, visible, slopes, positions, q0, q1):
        """The block's z (-inf outside ``visible``), with the ALiBi bias when ``slopes`` is given."""
        z = scale * (qb @ kb.transpose(-1, -2))
        if slopes is not None:
            z = z + alibi_logit_bias(slopes, positions, q0, q1, kb.shape[-2])
        return torch.where(visible, z, float("-inf"))

    @staticmethod
    def forward(ctx, q, k, v, alpha: float, scale: float, block: int, segment_ids, slopes):
        sq, sk = q.shape[-2], k.shape[-2]
        out = torch.empty_like(q)
        tau, norm = q.new_empty(q.shape[:-1] + (1,)), q.new_empty(q.shape[:-1] + (1,))
        positions = None if slopes is None else key_positions(sk, segment_ids, q.device)
        for r0, r1 in row_blocks(sq, block):
            kp, visible = block_keys(sq, sk, r0, r1, segment_ids, q.device)
            qb, kb = q[..., r0:r1, :], k[..., :kp, :]
            z = _ChunkedEntmax._logits(qb, kb, scale, visible, slopes, positions, sk - sq + r0, kp)
            p, tau[..., r0:r1, :], norm[..., r0:r1, :] = _threshold(z, alpha, bisection_steps(q.dtype))
            out[..., r0:r1, :] = p @ v[..., :kp, :]
        ctx.save_for_backward(q, k, v, tau, norm)
        ctx.alpha, ctx.scale, ctx.block, ctx.segment_ids = alpha, scale, block, segment_ids
        ctx.slopes, ctx.positions = slopes, positions
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with no_autocast(grad_out.device):
            return _ChunkedEntmax._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        q, k, v, tau, norm = ctx.saved_tensors
        alpha, scale = ctx.alpha, ctx.scale
        sq, sk = q.shape[-2], k.shape[-2]
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for r0, r1 in row_blocks(sq, ctx.block):
            kp, visible = block_keys(sq, sk, r0, r1, ctx.segment_ids, q.device)
            qb, kb, vb, gb = q[..., r0:r1, :], k[..., :kp, :], v[..., :kp, :], grad_out[..., r0:r1, :]
            z = _ChunkedEntmax._logits(qb, kb, scale, visible, ctx.slopes, ctx.positions, sk - sq + r0, kp)
            top = z.amax(-1, keepdim=True)
            x = (z - torch.where(top > float("-inf"), top, 0.0)) * (alpha - 1)
            p = torch.clamp(x - tau[..., r0:r1, :], min=0) ** (1 / (alpha - 1)) / norm[..., r0:r1, :]
            dz = _entmax_grad(p, gb @ vb.transpose(-1, -2), alpha)
            dq[..., r0:r1, :] = scale * (dz @ kb)
            dk[..., :kp, :] += scale * (dz.transpose(-1, -2) @ qb)
            dv[..., :kp, :] += p.transpose(-1, -2) @ gb
        return dq, dk, dv, None, None, None, None, None


def entmax_chunked(q, k, v, alpha: float, scale=None, segment_ids=None, block_size=None, slopes=None) -> torch.Tensor:
    """alpha-entmax attention in blocks of ``block_size`` query rows, O(S * block) memory (no logit dropout);
    optional ALiBi ``slopes`` (H,), fixed (no gradient)."""
    cdt = compute_dtype(q.dtype)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    block = int(block_size or default_row_block(q.shape[-2]))
    slopes = None if slopes is None else slopes.detach().to(cdt)
    args = (float(alpha), float(scale), block, segment_ids, slopes)
    return _ChunkedEntmax.apply(q.to(cdt), k.to(cdt), v.to(cdt), *args).to(q.dtype)


def entmax_attention(
    q,
    k,
    v,
    *,
    alpha: float = 1.5,
    scale: float | None = None,
    impl: str = "auto",
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
    slopes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal alpha-entmax attention for q (B, H, Sq, D), k/v (B, H, Sk, D), Sq <= Sk (queries are the last Sq
    keys); q carries any scaling (ASEntmax's theta). ``impl``: "naive", "chunked", or "auto" (chunked; naive under
    logit dropout). ``segment_ids`` (B, Sk) of the keys, -1 on padding, for packed or padded batches. ``slopes``
    (H,): NAPE's fixed ALiBi slopes, -m_h (p_i - p_j) added to z (0: a NoPE head). Computes in fp32 (fp64 for fp64
    inputs), also under an enclosing autocast, and returns q's dtype."""
    check_impl("entmax_attention", impl, logit_dropout)
    if not (isinstance(alpha, (int, float)) and 1 < alpha <= 2):
        raise ValueError(f"entmax_attention: alpha = {alpha!r}; expected a number in (1, 2]")
    with no_autocast(q.device):  # the threshold search in fp32 under any enclosing autocast
        if impl == "naive" or logit_dropout:
            return entmax_naive(q, k, v, alpha, scale, segment_ids, logit_dropout, slopes)
        return entmax_chunked(q, k, v, alpha, scale, segment_ids, slopes=slopes)
