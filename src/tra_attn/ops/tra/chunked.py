"""Chunked Threshold Relative Attention in PyTorch: O(S * block + S * D) memory, hand-written backward.

Keys are walked in blocks from the diagonal leftwards. Each block is scored against every query
that can see it (a "strip" of shape (rows, block)), and each row carries the number of kept keys
already seen to its right, so the contextual distance of a key is

    c_ij = carry_i + (kept keys of row i inside the block at or right of j).

Inside a strip the key block is stored reversed, which turns that in-block reverse count into a
plain cumulative sum. The softmax is accumulated online (running max, normaliser and output), the
forward saves the log-sum-exp per row (+inf for rows with no kept key) and the backward recomputes
each strip once, producing the complete dK/dV of its key block. See docs/carry.md and docs/backward.md.
The keep rule's windows are masks on a strip's first rows; with a sliding window, rows and key blocks
outside every window are skipped (docs/windows.md). Segment ids (packed documents, padding) mask a strip
that crosses a document boundary, and rows and key blocks outside every document of the strip are skipped
(``segments.StripPlan``, docs/varlen.md).
"""

from __future__ import annotations

import torch

from ..masks import compute_dtype
from .segments import Segments, StripPlan, segments_of

_NEG_INF = float("-inf")
# Dropped scores get this bias instead of -inf: masked_fill/where are several times slower than
# arithmetic on CPU, and exp(-inf) takes a slow path. Kept logits are untouched.
_DROP = 1e30
# exp() of inputs below about -87 (fp32) takes a slow path (about 30x). Shifted logits are clamped
# into [floor, 80] first: weights below exp(floor) relative to the row maximum are negligible,
# dropped entries are zeroed exactly by the keep mask afterwards, and the upper clamp only ever
# touches dropped entries (kept logits never exceed the row's log-sum-exp).
_EXP_FLOOR = {torch.float32: -80.0, torch.float64: -700.0}
_EXP_CEIL = 80.0


class _Workspace:
    """Flat scratch buffers reused by every strip: repeated large allocations page-fault on CPU."""

    def __init__(self, n_buffers: int, numel: int, like: torch.Tensor):
        self.buffers = [torch.empty(numel, dtype=like.dtype, device=like.device) for _ in range(n_buffers)]

    def get(self, index: int, shape: tuple[int, ...]) -> torch.Tensor:
        numel = shape[0] * shape[1] * shape[2]
        return self.buffers[index][:numel].view(shape)


class _Strip:
    """Per-block geometry: which query rows see key block [j0, j1), and their masks (docs/windows.md).

    Column t of the (reversed) block holds key j1 - 1 - t, at distance d = i - j1 + 1 + t from row i.
    ``allowed`` (causal, and inside the sliding window) and ``forced`` (inside the local window) cover the
    first rows of the strip, the only ones where they are not all ones (allowed) or all zeros (forced).
    With segment ids (``plan``), rows whose document starts right of the block stay out, and a strip that
    crosses a document boundary gets the segment mask.
    """

    def __init__(self, j0: int, j1: int, sq: int, sk: int, dtype, device, local_window=0, sliding_window=0, plan=None):
        offset = sk - sq  # query row r sits at absolute position offset + r
        self.j0, self.j1, self.plan = j0, j1, plan
        self.r0 = max(0, j0 - offset)  # first row that can see the block
        # Rows [r0, r1) are processed: with a sliding window, rows at distance >= window from every key of
        # the block stay out, and so do rows of later documents; pruning may lower r1 further.
        self.r1 = min(sq, j1 - 1 + sliding_window - offset) if sliding_window else sq
        if plan is not None:
            self.r1 = max(self.r0, min(self.r1, plan.rows_end[j0 // plan.block]))
        # Rows whose position is below j1 - 1 see only part of the block (the diagonal tile); with a
        # sliding window, every row of the strip may miss part of it.
        n_allowed = self.r1 - self.r0 if sliding_window else min(sq, j1 - 1 - offset) - self.r0
        # Rows with some key of the block at d < local_window.
        n_forced = min(self.r1, j1 - 1 + local_window - offset) - self.r0 if local_window else 0
        distance = None
        if max(n_allowed, n_forced) > 0:
            rows = offset + self.r0 + torch.arange(max(n_allowed, n_forced), device=device)
            distance = (rows - j1 + 1)[:, None] + torch.arange(j1 - j0, device=device)[None, :]
        self.allowed = self.forced = None
        if n_allowed > 0:
            inside = distance[:n_allowed] >= 0
            if sliding_window:
                inside &= distance[:n_allowed] < sliding_window
            self.allowed = inside.to(dtype)
        if n_forced > 0:
            self.forced = (distance[:n_forced] < local_window).to(dtype)

    def restrict(self, active: torch.Tensor | None) -> torch.Tensor | None:
        """With pruning, process only rows up to the last active one; returns their (N, R, 1) mask."""
        if active is None:
            return None
        rows = active[:, self.r0 : self.r1].any(0).nonzero()
        self.r1 = self.r0 + (int(rows[-1]) + 1 if len(rows) else 0)
        return active[:, self.r0 : self.r1, None]

    def logits(self, q_scaled, k_rev, log_gate, threshold, carry, ws: _Workspace, active=None):
        """Logits s + g * c, the keep mask (0/1) and the count c of rows [r0, r1), in ws buffers 0-2.

        Key columns are in reversed order, so the in-block reverse count is a cumulative sum.
        Updates ``carry`` (the kept keys right of the block) in place. Dropped entries hold
        arbitrary finite logits; callers mask them. ``active`` (N, R, 1) drops pruned rows.
        """
        r0, r1 = self.r0, self.r1
        q_rows = q_scaled[:, r0:r1]
        shape = (q_rows.shape[0], q_rows.shape[1], k_rev.shape[1])
        logits = torch.matmul(q_rows, k_rev.transpose(-1, -2), out=ws.get(0, shape))
        keep = torch.gt(logits, threshold, out=ws.get(1, shape))
        if self.forced is not None:  # locally kept whatever the score (0/1 values: max is "or")
            n = min(self.forced.shape[0], r1 - r0)
            keep[:, :n].add_(self.forced[:n]).clamp_(max=1.0)
        if self.allowed is not None:
            n = min(self.allowed.shape[0], r1 - r0)
            keep[:, :n].mul_(self.allowed[:n])
        same = None if self.plan is None else self.plan.mask(r0, r1, self.j0, self.j1, keep.dtype)
        if same is not None:  # (B, 1, R, block) over the (B * H) flattened rows
            keep.unflatten(0, (same.shape[0], -1)).mul_(same)
        if active is not None:
            keep.mul_(active)
        count = torch.cumsum(keep, dim=-1, out=ws.get(2, shape)).add_(carry[:, r0:r1, None])
        carry[:, r0:r1] = count[..., -1]
        logits.addcmul_(log_gate[:, r0:r1, None], count)
        return logits, keep, count


def _blocks(sk: int, block: int, first_key: int = 0):
    """Key blocks [j0, j1), right to left, down to the block holding key ``first_key``."""
    if sk == 0:
        return
    for j0 in range(((sk - 1) // block) * block, (first_key // block) * block - 1, -block):
        yield j0, min(j0 + block, sk)


def first_key(sq: int, sk: int, sliding_window: int, plan: StripPlan | None = None) -> int:
    """The leftmost key inside some query's sliding window and document (0 without either): blocks left of it
    are skipped."""
    window = max(0, sk - sq - sliding_window + 1) if sliding_window else 0
    return window if plan is None else max(window, plan.first_key)


def _masked_exp(shifted: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """exp(shifted) on kept entries, exactly 0 elsewhere (in place on ``shifted``)."""
    return shifted.clamp_(_EXP_FLOOR[shifted.dtype], _EXP_CEIL).exp_().mul_(keep)


def score_bound(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """(..., Sq) upper bound on scale * q_i . k_j over all keys j (Cauchy-Schwarz)."""
    return scale * q.norm(dim=-1) * k.norm(dim=-1).amax(dim=-1, keepdim=True)


class _Pruning:
    """Early exit (docs/early_exit.md): a row stops once the attention mass left of it is below exp(-tau).

    Unvisited kept keys of row i have counts carry_i + 1, carry_i + 2, ... and scores at most
    smax_i, so their share of the softmax is at most exp(smax_i + g_i (carry_i + 1) - m_i) / (1 - e^g_i).
    Rows stop individually; ``stop`` records the left edge of the last key block each row visited
    so that the backward visits exactly the same keys.
    """

    def __init__(self, q, k, log_gate, scale: float, tau: float):
        self.tau = tau
        self.smax = score_bound(q, k, scale)
        self.tail = -torch.log(-torch.expm1(log_gate))  # +inf where the gate is 0: such rows never stop
        self.active = torch.ones_like(log_gate, dtype=torch.bool)
        self.stop = torch.zeros_like(log_gate, dtype=torch.long)

    def update(self, strip: _Strip, log_gate, carry, m) -> None:
        rows = slice(strip.r0, strip.r1)
        bound = self.smax[:, rows] + log_gate[:, rows] * (carry[:, rows] + 1) - m[:, rows] + self.tail[:, rows]
        done = self.active[:, rows] & (m[:, rows] > _NEG_INF) & (bound < -self.tau)
        self.active[:, rows] &= ~done
        self.stop[:, rows].masked_fill_(done, strip.j0)


def _forward(q, k, v, log_gate, scale: float, threshold: float, block: int, prune_tau: float | None, windows, plan):
    """Output, LSE (+inf for empty rows), kept keys per row, and the pruning stops (or None).

    ``windows`` is (local_window, sliding_window); ``plan`` the ``StripPlan`` of the segment ids (or None)."""
    n, sq, d = q.shape
    sk = k.shape[1]
    dt = q.dtype
    q_scaled = q * scale
    m = torch.full((n, sq), _NEG_INF, dtype=dt, device=q.device)
    norm = torch.zeros((n, sq), dtype=dt, device=q.device)
    acc = torch.zeros((n, sq, d), dtype=dt, device=q.device)
    carry = torch.zeros((n, sq), dtype=dt, device=q.device)
    ws = _Workspace(4, n * sq * min(block, sk), q)
    pruning = None if prune_tau is None else _Pruning(q, k, log_gate, scale, prune_tau)
    for j0, j1 in _blocks(sk, block, first_key(sq, sk, windows[1], plan)):
        strip = _Strip(j0, j1, sq, sk, dt, q.device, *windows, plan)
        active = strip.restrict(None if pruning is None else pruning.active)
        r0, r1 = strip.r0, strip.r1
        if r1 == r0:
            continue
        k_rev, v_rev = k[:, j0:j1].flip(1), v[:, j0:j1].flip(1)
        logits, keep, _ = strip.logits(q_scaled, k_rev, log_gate, threshold, carry, ws, active)
        # Row maximum over kept entries only: dropped entries get -_DROP added.
        drop_bias = torch.mul(keep, _DROP, out=ws.get(3, logits.shape)).sub_(_DROP)
        block_max = logits.add_(drop_bias).amax(-1)
        block_max.masked_fill_(block_max < -_DROP / 2, _NEG_INF)
        m_old = m[:, r0:r1]
        m_new = torch.maximum(m_old, block_max)
        m_safe = m_new.masked_fill(m_new == _NEG_INF, 0.0)
        alpha = torch.exp(m_old - m_safe)
        p = _masked_exp(logits.sub_(m_safe[..., None]), keep)
        norm[:, r0:r1].mul_(alpha).add_(p.sum(-1))
        acc[:, r0:r1].mul_(alpha[..., None]).baddbmm_(p, v_rev)
        m_old.copy_(m_new)
        if pruning is not None:
            pruning.update(strip, log_gate, carry, m)
    has_key = norm > 0
    safe_norm = torch.where(has_key, norm, 1.0)
    out = acc.div_(safe_norm[..., None])
    lse = torch.where(has_key, m + torch.log(safe_norm), float("inf"))
    return out, lse, carry, None if pruning is None else pruning.stop


class ChunkedTRA(torch.autograd.Function):
    """Autograd function over flattened (N = B * H) inputs in the compute dtype."""

    @staticmethod
    def forward(ctx, q, k, v, log_gate, scale: float, threshold: float, block: int, prune_tau, windows, plan):
        out, lse, _, stop = _forward(q, k, v, log_gate, scale, threshold, block, prune_tau, windows, plan)
        ctx.save_for_backward(q, k, v, log_gate, out, lse, stop)
        ctx.scale, ctx.threshold, ctx.block, ctx.windows, ctx.plan = scale, threshold, block, windows, plan
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with torch.autocast(grad_out.device.type, enabled=False):
            return ChunkedTRA._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        q, k, v, log_gate, out, lse, stop = ctx.saved_tensors
        scale, threshold, block, windows, plan = ctx.scale, ctx.threshold, ctx.block, ctx.windows, ctx.plan
        n, sq, _ = q.shape
        sk = k.shape[1]
        grad_out = grad_out.to(q.dtype)
        q_scaled = q * scale
        delta = (grad_out * out).sum(-1)  # D_i = dO_i . O_i
        dq = torch.zeros_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dgate = torch.zeros_like(log_gate)
        carry = torch.zeros_like(log_gate)
        ws = _Workspace(4, n * sq * min(block, sk), q)
        for j0, j1 in _blocks(sk, block, first_key(sq, sk, windows[1], plan)):
            strip = _Strip(j0, j1, sq, sk, q.dtype, q.device, *windows, plan)
            active = strip.restrict(None if stop is None else stop <= j0)  # the keys the forward visited
            r0, r1 = strip.r0, strip.r1
            if r1 == r0:
                continue
            k_rev, v_rev = k[:, j0:j1].flip(1), v[:, j0:j1].flip(1)
            logits, keep, count = strip.logits(q_scaled, k_rev, log_gate, threshold, carry, ws, active)
            # lse = +inf on rows with no kept key, so their weights are exactly 0 as well.
            p = _masked_exp(logits.sub_(lse[:, r0:r1, None]), keep)
            go = grad_out[:, r0:r1]
            dp = torch.matmul(go, v_rev.transpose(-1, -2), out=ws.get(3, p.shape))
            dlogits = dp.sub_(delta[:, r0:r1, None]).mul_(p)
            dq[:, r0:r1].baddbmm_(dlogits, k_rev)
            dk[:, j0:j1] = torch.matmul(dlogits.transpose(-1, -2), q_scaled[:, r0:r1]).flip(1)
            dv[:, j0:j1] = torch.matmul(p.transpose(-1, -2), go).flip(1)
            dgate[:, r0:r1] += torch.einsum("nrt,nrt->nr", dlogits, count)
        return dq.mul_(scale), dk, dv, dgate, None, None, None, None, None, None


def default_block_size(sq: int, sk: int) -> int:
    """Key-block width. 64 was fastest on a 2-core CPU at S = 1k-8k (benchmarks/attention.py);
    with few query rows (decoding, short chunks) one wide block amortises the Python overhead."""
    if sq <= 64:
        return min(max(sk, 1), 2048)
    return 64


def _flatten(q, k, v, log_gate):
    b, h, sq, d = q.shape
    sk = k.shape[2]
    cdt = compute_dtype(q.dtype)
    return (
        q.reshape(b * h, sq, d).to(cdt),
        k.reshape(b * h, sk, d).to(cdt),
        v.reshape(b * h, sk, d).to(cdt),
        log_gate.reshape(b * h, sq).to(cdt),
    )


def tra_chunked(
    q,
    k,
    v,
    log_gate,
    scale: float,
    threshold: float,
    block_size: int | None = None,
    prune_tau: float | None = None,
    local_window: int = 0,
    sliding_window: int = 0,
    segment_ids: torch.Tensor | None = None,
):
    """Chunked TRA for q (B,H,Sq,D), k/v (B,H,Sk,D), log_gate (B,H,Sq); output in q's dtype.

    ``segment_ids`` (B, Sk) int32 (``ops/varlen.py``, or None): keys are kept only within the query's document."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    block = int(block_size or default_block_size(sq, sk))
    windows = (int(local_window), int(sliding_window))
    plan = _plan(segments_of(segment_ids, sq), sq, sk, block, windows[1])
    out = ChunkedTRA.apply(
        *_flatten(q, k, v, log_gate), float(scale), float(threshold), block, prune_tau, windows, plan
    )
    return out.reshape(b, h, sq, d).to(q.dtype)


def _plan(segments: Segments | None, sq: int, sk: int, block: int, sliding_window: int) -> StripPlan | None:
    return None if segments is None else StripPlan(segments, sq, sk, block, sliding_window)


@torch.no_grad()
def chunked_forward_stats(
    q,
    k,
    v,
    log_gate,
    scale: float,
    threshold: float,
    block_size: int | None = None,
    prune_tau: float | None = None,
    local_window: int = 0,
    sliding_window: int = 0,
    segments: Segments | None = None,
):
    """Per row, without autograd: out, lse, kept keys counted, and the first key position visited.

    (out, lse, count) are what a split-KV combine needs; the first key visited (0 without pruning)
    tells exactly which keys pruning skipped. ``segments`` as ``segments.segments_of`` gives them (or None).
    """
    b, h, sq, d = q.shape
    sk = k.shape[2]
    block = int(block_size or default_block_size(sq, sk))
    windows = (int(local_window), int(sliding_window))
    plan = _plan(segments, sq, sk, block, windows[1])
    out, lse, count, stop = _forward(
        *_flatten(q, k, v, log_gate), float(scale), float(threshold), block, prune_tau, windows, plan
    )
    key_start = torch.zeros((b, h, sq), dtype=torch.long, device=q.device) if stop is None else stop.reshape(b, h, sq)
    return out.reshape(b, h, sq, d), lse.reshape(b, h, sq), count.reshape(b, h, sq), key_start
