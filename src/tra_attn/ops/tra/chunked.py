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
(``segments.StripPlan``, docs/varlen.md). Logit dropout multiplies each strip's logits by the factors of the
hash in ``dropout.py``; the keep surrogate adds its gradient strip by strip (``surrogate_backward.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..autocast import no_autocast
from ..masks import compute_dtype
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, PreparedAids, TrainingAids
from .denormals import EXP_FLOOR, flush_tiny_
from .dropout import SIGN, LogitDropout, scrambled
from .segments import Segments, StripPlan
from .surrogate_backward import SurrogateState, kept_dropped_sums

_NEG_INF = float("-inf")
# Dropped scores get this bias instead of -inf: masked_fill/where are several times slower than
# arithmetic on CPU, and exp(-inf) takes a slow path. Kept logits are untouched.
_DROP = 1e30
# Shifted logits are clamped into [EXP_FLOOR, 80] before exp (denormals.py): weights below exp(floor)
# relative to the row maximum are negligible, dropped entries are zeroed exactly by the keep mask
# afterwards, and the upper clamp only ever touches dropped entries (kept logits never exceed the row's
# log-sum-exp).
_EXP_CEIL = 80.0
NO_PREPARED = PreparedAids()
# A fixed shift per row is used when it exceeds the row's largest kept logit by at most this: the largest
# kept weight is then >= exp(-slack), and EXP_FLOOR only touches weights below exp(floor + slack) of it.
_SHIFT_SLACK = {torch.float32: 40.0, torch.float64: 350.0}


class _Workspace:
    """Flat scratch buffers reused by every strip: repeated large allocations page-fault on CPU."""

    def __init__(self, n_buffers: int, numel: int, like: torch.Tensor):
        self.numel, self.like = numel, like
        self.buffers: dict[tuple, torch.Tensor] = {}
        for index in range(n_buffers):
            self.buffers[index, like.dtype] = torch.empty(numel, dtype=like.dtype, device=like.device)

    def get(self, index: int, shape: tuple[int, ...], dtype=None) -> torch.Tensor:
        """Buffer ``index`` (of ``dtype``, the inputs' by default) viewed as ``shape``."""
        key = (index, dtype or self.like.dtype)
        if key not in self.buffers:
            self.buffers[key] = torch.empty(self.numel, dtype=key[1], device=self.like.device)
        numel = shape[0] * shape[1] * shape[2]
        return self.buffers[key][:numel].view(shape)


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
        self.distance = None
        if max(n_allowed, n_forced) > 0:
            rows = offset + self.r0 + torch.arange(max(n_allowed, n_forced), device=device)
            self.distance = (rows - j1 + 1)[:, None] + torch.arange(j1 - j0, device=device)[None, :]
        self.allowed = self.forced = None
        if n_allowed > 0:
            inside = self.distance[:n_allowed] >= 0
            if sliding_window:
                inside &= self.distance[:n_allowed] < sliding_window
            self.allowed = inside.to(dtype)
        if n_forced > 0:
            self.forced = (self.distance[:n_forced] < local_window).to(dtype)
        self.windows, self.dtype = (local_window, sliding_window), dtype

    def restrict(self, active: torch.Tensor | None) -> torch.Tensor | None:
        """With pruning, process only rows up to the last active one; returns their (N, R, 1) mask."""
        if active is None:
            return None
        rows = active[:, self.r0 : self.r1].any(0).nonzero()
        self.r1 = self.r0 + (int(rows[-1]) + 1 if len(rows) else 0)
        return active[:, self.r0 : self.r1, None]

    def logits(self, q_scaled, k_rev, log_gate, threshold, carry, ws: _Workspace, active=None, with_carry=True):
        """Logits s + g * c, the keep mask (0/1) and the count c of rows [r0, r1), in ws buffers 0-2.

        Key columns are in reversed order, so the in-block reverse count is a cumulative sum.
        Updates ``carry`` (the kept keys right of the block) in place. Dropped entries hold
        arbitrary finite logits; callers mask them. ``active`` (N, R, 1) drops pruned rows.
        Without ``with_carry`` the count and the logits leave out the carry (the kept keys right of the block),
        a constant per row that the caller adds to the row's shift instead.
        With ``ws.scores_transform = (a, b)`` (the surrogate) the scores are also left as a * s + b in ws buffer 4.
        """
        r0, r1 = self.r0, self.r1
        q_rows = q_scaled[:, r0:r1]
        shape = (q_rows.shape[0], q_rows.shape[1], k_rev.shape[1])
        logits = torch.matmul(q_rows, k_rev.transpose(-1, -2), out=ws.get(0, shape))
        keep = torch.gt(logits, threshold, out=ws.get(1, shape))
        transform = getattr(ws, "scores_transform", None)
        if transform is not None:
            torch.add(logits.new_tensor(transform[1]), logits, alpha=transform[0], out=ws.get(4, shape))
        if self.forced is not None:  # locally kept whatever the score (0/1 values: max is "or")
            n = min(self.forced.shape[0], r1 - r0)
            keep[:, :n].add_(self.forced[:n]).clamp_(max=1.0)
        if self.allowed is not None:
            n = min(self.allowed.shape[0], r1 - r0)
            keep[:, :n].mul_(self.allowed[:n])
        same = self.same_document(keep.dtype)
        if same is not None:  # (B, 1, R, block) over the (B * H) flattened rows
            keep.unflatten(0, (same.shape[0], -1)).mul_(same)
        if active is not None:
            keep.mul_(active)
        count = torch.cumsum(keep, dim=-1, out=ws.get(2, shape))
        if with_carry:
            count.add_(carry[:, r0:r1, None])
            carry[:, r0:r1] = count[..., -1]
        else:
            carry[:, r0:r1] += count[..., -1]
        logits.addcmul_(log_gate[:, r0:r1, None], count)
        return logits, keep, count

    def same_document(self, dtype) -> torch.Tensor | None:
        """(B, 1, R, block) 0/1: row and key in one document; None when the strip needs no mask."""
        return None if self.plan is None else self.plan.mask(self.r0, self.r1, self.j0, self.j1, dtype)

    def decided(self) -> torch.Tensor | None:
        """(n, block) 0/1 on the strip's first n rows: the keep rule compares the score with the threshold
        there (causal, inside the sliding window, beyond the local window); 1 on every later row. None: all 1."""
        if self.distance is None:
            return None
        local, sliding = self.windows
        d = self.distance[: self.r1 - self.r0]
        inside = (d >= 0) & (d >= local)
        if sliding:
            inside &= d < sliding
        return inside.to(self.dtype)

    def dropout_factors(self, dropout: LogitDropout, ws: _Workspace, shape) -> torch.Tensor:
        """(N, R, block) 0 or 1 / (1 - p) per logit of the strip (the hash of ``dropout.py``), in ws buffer 3."""
        rows = dropout.rows[:, self.r0 : self.r1, None]
        cols = dropout.cols[self.j0 : self.j1].flip(0)
        x = scrambled(rows, cols, ws.get(5, shape, torch.int32), ws.get(6, shape, torch.int32))
        # kept iff u = x ^ 2^31 >= p32, i.e. x (signed) >= p32 - 2^31
        return torch.ge(x, dropout.p32 - SIGN, out=ws.get(3, shape)).mul_(dropout.scale)


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
    return shifted.clamp_(EXP_FLOOR[shifted.dtype], _EXP_CEIL).exp_().mul_(keep)


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


class _Stats(NamedTuple):
    """What the forward returns per row: output, log-sum-exp (+inf: no kept key), kept keys counted, the
    running maximum of the kept logits (-inf: none), the pruning stops (or None), and with the surrogate under
    dropout the values and the number of the kept keys whose logit was dropped (or None)."""

    out: torch.Tensor
    lse: torch.Tensor
    count: torch.Tensor
    m: torch.Tensor
    stop: torch.Tensor | None
    dropped_values: torch.Tensor | None
    dropped_count: torch.Tensor | None


def bounded_shift(q, k, log_gate, scale: float, threshold: float, local_window: int) -> torch.Tensor | None:
    """(N, Sq) a fixed softmax shift per row, smax_i + g_i, when it is provably within ``_SHIFT_SLACK`` of the
    row's largest kept logit; None when some row has no such guarantee (docs/carry.md, section 3.3).

    smax_i = scale |q_i| max_{j <= i} |k_j| bounds the scores of the keys the row can see (no key right of it
    enters, so a row's bits never depend on a key it cannot see). Every kept logit is s + g c <= smax + g
    (c >= 1, g <= 0), and the nearest kept key (c = 1) scores at least threshold (at least -smax with a local
    window or no threshold), so the largest kept logit is at least max(threshold, -smax) + g. Reads the data
    on the host: CPU tensors only, outside torch.compile. Not for sliding windows or documents, whose rows see
    fewer keys."""
    sq, sk = q.shape[1], k.shape[1]
    # Under torch.compile the host read would break the graph: the running maximum serves instead.
    if q.device.type != "cpu" or not q.numel() or torch.compiler.is_compiling():
        return None
    key_norms = k.norm(dim=-1).cummax(dim=-1).values[:, sk - sq :]
    smax = scale * q.norm(dim=-1) * key_norms
    lowest = -smax if local_window or threshold == _NEG_INF else torch.clamp(smax.new_tensor(threshold), min=-smax)
    if bool((smax - lowest).max() > _SHIFT_SLACK[q.dtype]):
        return None
    return smax + log_gate


def _forward(
    q, k, v, log_gate, scale: float, threshold: float, block: int, prune_tau, windows, plan, training=NO_PREPARED
) -> _Stats:
    """The online softmax over the key blocks (docs/carry.md). ``windows`` is (local_window, sliding_window);
    ``plan`` the ``StripPlan`` of the segment ids (or None); ``training`` the dropout and surrogate
    (``TrainingAids.prepared``).

    Without pruning or dropout a row's shift is fixed (``bounded_shift``) when the scores allow it, which saves
    the running maximum and the rescaling of the accumulators; otherwise it is the running maximum of the kept
    logits (section 3). The surrogate's backward needs that maximum: with tau > 0 it is tracked either way."""
    n, sq, d = q.shape
    sk = k.shape[1]
    dt = q.dtype
    q_scaled = q * scale
    m = torch.full((n, sq), _NEG_INF, dtype=dt, device=q.device)
    norm = torch.zeros((n, sq), dtype=dt, device=q.device)
    acc = torch.zeros((n, sq, d), dtype=dt, device=q.device)
    carry = torch.zeros((n, sq), dtype=dt, device=q.device)
    dropout = training.dropout
    sums = (torch.zeros_like(acc), torch.zeros_like(norm)) if dropout is not None and training.tau else None
    ws = _Workspace(4, n * sq * min(block, sk), q)
    pruning = None if prune_tau is None else _Pruning(q, k, log_gate, scale, prune_tau)
    shift = None
    # Each row sees its whole causal prefix (no sliding window or documents that bind): a fixed shift may do.
    prefix = (plan is None or plan.whole) and (windows[1] == 0 or windows[1] >= sk)
    if pruning is None and dropout is None and prefix:
        shift = bounded_shift(q, k, log_gate, scale, threshold, windows[0])
    for j0, j1 in _blocks(sk, block, first_key(sq, sk, windows[1], plan)):
        strip = _Strip(j0, j1, sq, sk, dt, q.device, *windows, plan)
        active = strip.restrict(None if pruning is None else pruning.active)
        r0, r1 = strip.r0, strip.r1
        if r1 == r0:
            continue
        k_rev, v_rev = k[:, j0:j1].flip(1), v[:, j0:j1].flip(1)
        # Without dropout the carry is a constant per row: it joins the row's shift instead of every logit.
        fold = dropout is None
        logits, keep, count = strip.logits(q_scaled, k_rev, log_gate, threshold, carry, ws, active, not fold)
        offset = log_gate[:, r0:r1] * (carry[:, r0:r1] - count[..., -1]) if fold else 0.0  # g * carry before
        if dropout is not None:
            factors = strip.dropout_factors(dropout, ws, logits.shape)
            if sums is not None:
                kept_dropped_sums(keep, factors, v_rev, sums[0][:, r0:r1], sums[1][:, r0:r1])
            logits.mul_(factors)
        if shift is not None:
            if training.tau:  # the surrogate's backward reads the largest kept logit
                m[:, r0:r1] = torch.maximum(m[:, r0:r1], _kept_max(logits, keep, ws, inplace=False) + offset)
            p = _masked_exp(logits.sub_((shift[:, r0:r1] - offset)[..., None]), keep)
            norm[:, r0:r1].add_(p.sum(-1))
            acc[:, r0:r1].baddbmm_(p, v_rev)
            continue
        block_max = _kept_max(logits, keep, ws, inplace=True) + offset
        m_old = m[:, r0:r1]
        m_new = torch.maximum(m_old, block_max)
        m_safe = m_new.masked_fill(m_new == _NEG_INF, 0.0)
        alpha = torch.exp(m_old - m_safe)
        p = _masked_exp(logits.sub_((m_safe - offset)[..., None]), keep)
        norm[:, r0:r1].mul_(alpha).add_(p.sum(-1))
        acc[:, r0:r1].mul_(alpha[..., None]).baddbmm_(p, v_rev)
        m_old.copy_(m_new)
        if pruning is not None:
            pruning.update(strip, log_gate, carry, m)
    has_key = norm > 0
    safe_norm = torch.where(has_key, norm, 1.0)
    out = acc.div_(safe_norm[..., None])
    top = m if shift is None else shift
    lse = torch.where(has_key, top + torch.log(safe_norm), float("inf"))
    stop = None if pruning is None else pruning.stop
    return _Stats(out, lse, carry, m, stop, *(sums or (None, None)))


def _kept_max(logits, keep, ws: _Workspace, inplace: bool) -> torch.Tensor:
    """(N, R) the largest logit over kept entries, -inf for a row that keeps none. The dropped entries get
    -_DROP added (into ``logits`` itself when ``inplace``, else into ws buffer 3)."""
    bias = torch.sub(keep, 1.0, out=ws.get(3, logits.shape))
    biased = logits.add_(bias, alpha=_DROP) if inplace else torch.add(logits, bias, alpha=_DROP, out=bias)
    block_max = biased.amax(-1)
    return block_max.masked_fill_(block_max < -_DROP / 2, _NEG_INF)


class ChunkedTRA(torch.autograd.Function):
    """Autograd function over flattened (N = B * H) inputs in the compute dtype."""

    @staticmethod
    def forward(ctx, q, k, v, log_gate, scale: float, threshold: float, block: int, prune_tau, windows, plan, training):
        stats = _forward(q, k, v, log_gate, scale, threshold, block, prune_tau, windows, plan, training)
        ctx.save_for_backward(
            q, k, v, log_gate, stats.out, stats.lse, stats.stop, stats.m, stats.dropped_values, stats.dropped_count
        )
        ctx.scale, ctx.threshold, ctx.block, ctx.windows, ctx.plan = scale, threshold, block, windows, plan
        ctx.training = training
        return stats.out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        with no_autocast(grad_out.device):
            return ChunkedTRA._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        q, k, v, log_gate, out, lse, stop, m, dropped_values, dropped_count = ctx.saved_tensors
        scale, threshold, block, windows, plan = ctx.scale, ctx.threshold, ctx.block, ctx.windows, ctx.plan
        tau, dropout = ctx.training
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
        surrogate = None
        if tau:
            sums = None if dropout is None else (dropped_values, dropped_count, dropout.scale)
            surrogate = SurrogateState(tau, threshold, m, lse, log_gate, grad_out, delta, sums)
            ws.scores_transform = surrogate.scores_transform
        for j0, j1 in _blocks(sk, block, first_key(sq, sk, windows[1], plan)):
            strip = _Strip(j0, j1, sq, sk, q.dtype, q.device, *windows, plan)
            active = strip.restrict(None if stop is None else stop <= j0)  # the keys the forward visited
            r0, r1 = strip.r0, strip.r1
            if r1 == r0:
                continue
            k_rev, v_rev = k[:, j0:j1].flip(1), v[:, j0:j1].flip(1)
            logits, keep, count = strip.logits(q_scaled, k_rev, log_gate, threshold, carry, ws, active)
            factors = None if dropout is None else strip.dropout_factors(dropout, ws, logits.shape)
            if factors is not None:
                logits.mul_(factors)
            if surrogate is not None:  # the would-be weights of every key, before the keep mask zeroes them
                weights = surrogate.weights(strip, logits, ws)
                p = torch.mul(weights, keep, out=logits)
            else:
                # lse = +inf on rows with no kept key, so their weights are exactly 0 as well.
                p = flush_tiny_(_masked_exp(logits.sub_(lse[:, r0:r1, None]), keep))
            go = grad_out[:, r0:r1]
            dp = torch.matmul(go, v_rev.transpose(-1, -2), out=ws.get(5, p.shape)).sub_(delta[:, r0:r1, None])
            # The gradient of the (dropped) logit; the surrogate still needs dP - Delta afterwards.
            dlogits = dp.mul_(p) if surrogate is None else torch.mul(dp, p, out=ws.get(6, p.shape))
            if factors is not None:  # the gradient of the logit before its dropout factor
                dlogits.mul_(factors)
            dgate[:, r0:r1] += torch.einsum("nrt,nrt->nr", dlogits, count)
            dv[:, j0:j1] = torch.matmul(p.transpose(-1, -2), go).flip(1)
            dscores = dlogits if surrogate is None else surrogate.score_gradient(strip, dlogits, dp, weights, ws)
            dq[:, r0:r1].baddbmm_(dscores, k_rev)
            dk[:, j0:j1] = torch.matmul(dscores.transpose(-1, -2), q_scaled[:, r0:r1]).flip(1)
        return dq.mul_(scale), dk, dv, dgate, None, None, None, None, None, None, None


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
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids = NO_AIDS,
    prune_tau: float | None = None,
    block_size: int | None = None,
):
    """Chunked TRA for q (B,H,Sq,D), k/v (B,H,Sk,D), log_gate (B,H,Sq); output in q's dtype.

    ``keep`` and ``documents`` decide the kept keys (a key of another document or padding is never kept); every
    aid is served: the keep surrogate (tau > 0; the forward values are those without it, bit for bit) and the
    logit dropout (the mask of ``aids.dropout_seed``), as in the op. Neither combines with ``prune_tau``, the
    early exit. ``block_size``: the key-block width (``default_block_size`` when None)."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    if prune_tau is not None and aids.active:
        raise ValueError("tra_chunked: prune_tau does not combine with keep_surrogate or logit_dropout")
    block = int(block_size or default_block_size(sq, sk))
    plan = _plan(documents.segments(sq), sq, sk, block, keep.sliding_window)
    training = aids.prepared(keep, q, sk)
    out = ChunkedTRA.apply(
        *_flatten(q, k, v, log_gate), float(scale), keep.threshold, block, prune_tau, keep.windows, plan, training
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
    *,
    scale: float,
    keep: KeepRule,
    segments: Segments | None = None,
    prune_tau: float | None = None,
    block_size: int | None = None,
):
    """Per row, without autograd: out, lse, kept keys counted, and the first key position visited.

    (out, lse, count) are what a split-KV combine needs (``split_kv.py`` calls it per split, with the split's
    ``segments``, the per-key and per-query form of the documents: ``Documents.segments``, or None); the first
    key visited (0 without pruning) tells exactly which keys pruning skipped.
    """
    b, h, sq, d = q.shape
    sk = k.shape[2]
    block = int(block_size or default_block_size(sq, sk))
    plan = _plan(segments, sq, sk, block, keep.sliding_window)
    stats = _forward(*_flatten(q, k, v, log_gate), float(scale), keep.threshold, block, prune_tau, keep.windows, plan)
    stop = stats.stop
    key_start = torch.zeros((b, h, sq), dtype=torch.long, device=q.device) if stop is None else stop.reshape(b, h, sq)
    return stats.out.reshape(b, h, sq, d), stats.lse.reshape(b, h, sq), stats.count.reshape(b, h, sq), key_start
