"""Fused Triton kernels for Threshold Relative Attention (forward and backward).

Both kernels are query-major: one program per (query block, batch * head). Key blocks are visited
from the diagonal leftwards, and each query row carries the number of kept keys already seen to its
right, so the contextual distance of a key is ``carry + (kept keys of the row inside the tile at or
right of it)`` (docs/carry.md). The forward runs an online softmax in base 2 (log2(e) folded
into the scores and the gate) and stores per row the natural-log LSE (+inf for rows with no kept
key) and the number of kept keys, and per query block the lowest key block it visited. The keep
rule's windows (local: always kept; sliding: never kept beyond) are part of the tile's mask, and key
blocks outside every row's sliding window are not visited (docs/windows.md). With segment ids
(HAS_SEG: packed documents, padding) a key is kept only in its query's document, and key blocks left of
the earliest document start of a query block are not visited (docs/varlen.md). With
pruning on, a query block stops once the bound of docs/early_exit.md proves that the attention
mass left of it is below exp(-tau) for every row. The backward visits exactly the same key blocks,
recomputes each tile, and reduces dK/dV across query blocks with fp32 atomics (docs/backward.md). With INTERIOR
(opt-in: ``triton_op.INTERIOR``) both passes visit the key blocks wholly left of every row's local window in a loop
of their own, whose tiles skip the mask's arithmetic.

This file is excluded from the code formatter: kernel signatures stay compact on purpose.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _fp32(x):
    return tl.cast(x, tl.float32)


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    """tl.dot; exact fp32 products for fp32 inputs (IEEE) instead of TF32."""
    if IEEE:
        out = tl.dot(a, b, input_precision="ieee")
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def _scramble(x):
    """The per-logit half of the dropout hash (ops/tra/dropout.py) on uint32: two multiply-xorshift steps."""
    x = x ^ (x >> 16)
    x = x * 0x21F0AAAD
    x = x ^ (x >> 15)
    return x * 0x735A2D97


@triton.jit
def _drop_factors(rows, DROPC, offs_n, SK, p32s, drop_scale):
    """(BM, BN) dropout factors, 0 or 1 / (1 - p), of the row keys ``rows`` (BM,) and the keys ``offs_n``: a
    logit is dropped iff scramble(row ^ col), read as a signed int32, is below p32 - 2^31 (dropout.py)."""
    cols = tl.load(DROPC + offs_n, mask=offs_n < SK, other=0).to(tl.uint32, bitcast=True)
    x = _scramble(rows[:, None] ^ cols[None, :])
    return tl.where(x.to(tl.int32, bitcast=True) < p32s, 0.0, drop_scale)


@triton.jit
def _row_keys(DROPR, bh, offs_m, SQ, DROPOUT: tl.constexpr):
    """The dropout hash's keys of the query rows ``offs_m`` (uint32; unused without dropout)."""
    if DROPOUT:
        rows = tl.load(DROPR + bh * SQ + offs_m, mask=offs_m < SQ, other=0).to(tl.uint32, bitcast=True)
    else:
        rows = offs_m.to(tl.uint32)
    return rows


@triton.jit
def _tile(q, k, g2, carry, offs_m, offs_n, q_pos, seg_q, seg_k, SQ, SK, scale, threshold, local_window,
          sliding_window, fac, BN: tl.constexpr, DOT_SCAN: tl.constexpr, IEEE: tl.constexpr, HAS_SEG: tl.constexpr,
          DROPOUT: tl.constexpr, MASKED: tl.constexpr = True):
    """Base-2 logits of one (BM, BN) tile (-inf off the keep mask; times the dropout factors ``fac`` with
    DROPOUT), the keep mask as 0/1, the count, the scores s (natural units) and the decided mask (the keep
    rule compares s with the threshold there: visible and beyond the local window). Without MASKED the tile is
    interior: every key is visible to every row and beyond its local window (no sliding window, no documents),
    so the score alone decides, and none of the mask's arithmetic runs."""
    s = _dot(q, tl.trans(k), IEEE) * scale
    if MASKED:
        dist = q_pos[:, None] - offs_n[None, :]  # i - j
        visible = (dist >= 0) & (offs_n[None, :] < SK) & (offs_m[:, None] < SQ)
        visible = visible & ((dist < sliding_window) | (sliding_window == 0))
        if HAS_SEG:  # the query's own document, never padding (a padding query keeps nothing)
            visible = visible & (seg_k[None, :] == seg_q[:, None]) & (seg_k[None, :] >= 0)
        # The threshold test in natural units, as the reference does; the local window keeps whatever the score.
        keep = visible & ((s > threshold) | (dist < local_window))
        decided = visible & (dist >= local_window)
    else:
        keep = s > threshold
        decided = s == s  # every key (the scores are finite: the op sanitises its inputs)
    keep_f = keep.to(tl.float32)
    if DOT_SCAN:  # in-tile reverse count as a matmul with a triangular 0/1 matrix (exact in fp16)
        rn = tl.arange(0, BN)
        tri = (rn[:, None] >= rn[None, :]).to(tl.float16)
        count = tl.dot(keep_f.to(tl.float16), tri) + carry[:, None]
    else:
        count = tl.cumsum(keep_f, axis=1, reverse=True) + carry[:, None]
    z2 = s * LOG2E + g2[:, None] * count
    if DROPOUT:
        z2 = z2 * fac
    z2 = tl.where(keep, z2, float("-inf"))
    return z2, keep_f, count, s, decided


@triton.jit
def _key_segments(SEGK, b, offs_n, SK, HAS_SEG: tl.constexpr):
    """The document ids of the keys ``offs_n`` (-1 beyond SK); unused without segments."""
    if HAS_SEG:
        seg_k = tl.load(SEGK + b * SK + offs_n, mask=offs_n < SK, other=-1)
    else:
        seg_k = offs_n
    return seg_k


@triton.jit
def _query_segments(SEGQ, QSTART, b, offs_m, first, SQ, SK, BN: tl.constexpr, HAS_SEG: tl.constexpr):
    """The document ids and starts of the query rows ``offs_m`` (-1 and SK beyond SQ), and ``first`` raised to
    the key block of the earliest start: no row keeps a key left of it."""
    if HAS_SEG:
        seg_q = tl.load(SEGQ + b * SQ + offs_m, mask=offs_m < SQ, other=-1)
        q_start = tl.load(QSTART + b * SQ + offs_m, mask=offs_m < SQ, other=SK)
        first = tl.maximum(first, tl.min(q_start, 0) // BN)
    else:
        seg_q = offs_m
        q_start = offs_m
    return seg_q, q_start, first


@triton.jit
def _fwd_block(q, g2, m_i, l_i, acc, carry, block, offs_m, offs_d, mask_d, q_pos, seg_q, K, V, SEGK, b, k_base,
               v_base, sks, svs, SQ, SK, scale, threshold, local_window, sliding_window, rows, DROPC, p32s, drop_scale,
               BN: tl.constexpr, DOT_SCAN: tl.constexpr, IEEE: tl.constexpr, HAS_SEG: tl.constexpr,
               DROPOUT: tl.constexpr, MASKED: tl.constexpr = True):
    """Fold key block ``block`` into the online softmax state (m_i, l_i, acc) and the carry (an interior block
    without MASKED: ``_tile``)."""
    offs_n = block * BN + tl.arange(0, BN)
    kv_mask = (offs_n < SK)[:, None] & mask_d[None, :]
    k = tl.load(K + k_base + offs_n[:, None] * sks + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + v_base + offs_n[:, None] * svs + offs_d[None, :], mask=kv_mask, other=0.0)
    seg_k = _key_segments(SEGK, b, offs_n, SK, HAS_SEG)
    if DROPOUT:
        fac = _drop_factors(rows, DROPC, offs_n, SK, p32s, drop_scale)
    else:
        fac = 1.0
    z2, keep_f, count, s, decided = _tile(q, k, g2, carry, offs_m, offs_n, q_pos, seg_q, seg_k, SQ, SK, scale,
                                          threshold, local_window, sliding_window, fac, BN, DOT_SCAN, IEEE, HAS_SEG,
                                          DROPOUT, MASKED)
    m_new = tl.maximum(m_i, tl.max(z2, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(z2 - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE)
    return m_new, l_i, acc, carry + tl.sum(keep_f, 1)


@triton.jit
def _first_block(first_pos, sliding_window, BN: tl.constexpr):
    """The key block of the leftmost key in the sliding window of the row at ``first_pos`` (0 without one)."""
    lowest = tl.maximum(first_pos - sliding_window + 1, 0)
    return tl.where(sliding_window > 0, lowest, 0) // BN


@triton.jit
def _interior_end(first_pos, first, n_blocks, local_window, sliding_window, BN: tl.constexpr, INTERIOR: tl.constexpr,
                  HAS_SEG: tl.constexpr):
    """With INTERIOR, the key blocks in [first, end) are interior for every row from ``first_pos`` on: wholly left
    of each row's local window, with no sliding window and no documents (``_tile`` without MASKED); else
    ``end = first`` and every block is masked."""
    end = first
    if INTERIOR and not HAS_SEG:
        end = tl.maximum(first_pos - local_window + 1, 0) // BN
        end = tl.where(sliding_window > 0, first, tl.minimum(tl.maximum(end, first), n_blocks))
    return end


@triton.jit
def tra_fwd_kernel(
    Q, K, V, G, SMAX, O, LSE, CNT, KSTART, SEGK, SEGQ, QSTART, MAX, DROPR, DROPC,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
    H, SQ, SK, scale, threshold, tau2, local_window, sliding_window, p32s, drop_scale,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
    PRUNE: tl.constexpr, DOT_SCAN: tl.constexpr, IEEE: tl.constexpr, HAS_SEG: tl.constexpr, DROPOUT: tl.constexpr,
    INTERIOR: tl.constexpr = False,
):
    # fp32 whatever the caller passes: torch.compile hands Python floats to user kernels as fp64.
    scale, threshold, tau2, drop_scale = _fp32(scale), _fp32(threshold), _fp32(tau2), _fp32(drop_scale)
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < SQ
    mask_d = offs_d < D
    row_mask = mask_m[:, None] & mask_d[None, :]
    q_pos = offs_m + (SK - SQ)  # absolute position of each query row
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :], mask=row_mask, other=0.0)
    g2 = tl.load(G + bh * SQ + offs_m, mask=mask_m, other=0.0) * LOG2E
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BLOCK_D], tl.float32)
    carry = tl.zeros([BM], tl.float32)
    k_base = b * skb + h * skh
    v_base = b * svb + h * svh
    n_blocks = tl.minimum(pid_m * BM + BM - 1 + SK - SQ, SK - 1) // BN + 1  # up to the diagonal
    first = _first_block(pid_m * BM + SK - SQ, sliding_window, BN)  # key blocks below it: outside every window
    seg_q, q_start, first = _query_segments(SEGQ, QSTART, b, offs_m, first, SQ, SK, BN, HAS_SEG)
    rows = _row_keys(DROPR, bh, offs_m, SQ, DROPOUT)
    if PRUNE:  # a while loop that stops early (Triton does not software-pipeline it)
        smax2 = tl.load(SMAX + bh * SQ + offs_m, mask=mask_m, other=0.0) * LOG2E
        # -log2(1 - 2^g2), the geometric tail of the bound; clamped at 126 when g = 0 (no
        # forgetting), so that such rows never meet the bound, without inf arithmetic.
        tail2 = -tl.log2(tl.maximum(1.0 - tl.exp2(g2), 1e-38))
        it = 0
        running = n_blocks > first
        while running:
            m_i, l_i, acc, carry = _fwd_block(q, g2, m_i, l_i, acc, carry, n_blocks - 1 - it, offs_m, offs_d, mask_d,
                                              q_pos, seg_q, K, V, SEGK, b, k_base, v_base, sks, svs, SQ, SK, scale,
                                              threshold, local_window, sliding_window, rows, DROPC, p32s, drop_scale,
                                              BN, DOT_SCAN, IEEE, HAS_SEG, DROPOUT)
            it += 1
            # Unvisited kept keys have counts carry + 1, carry + 2, ... and scores <= smax.
            bound = smax2 + g2 * (carry + 1.0) - m_i + tail2
            done = (offs_m >= SQ) | ((m_i > float("-inf")) & (bound < -tau2))
            if HAS_SEG:  # rows whose document starts at or right of the lowest visited key have no keys left
                done = done | (q_start >= (n_blocks - it) * BN)
            running = (it < n_blocks - first) & (tl.min(done.to(tl.int32), 0) == 0)
        k_start = n_blocks - it
    else:  # plain for loops, so that Triton pipelines the key/value loads: the masked blocks, then the interior
        interior = _interior_end(pid_m * BM + SK - SQ, first, n_blocks, local_window, sliding_window, BN, INTERIOR,
                                 HAS_SEG)
        for it in range(0, n_blocks - interior):
            m_i, l_i, acc, carry = _fwd_block(q, g2, m_i, l_i, acc, carry, n_blocks - 1 - it, offs_m, offs_d, mask_d,
                                              q_pos, seg_q, K, V, SEGK, b, k_base, v_base, sks, svs, SQ, SK, scale,
                                              threshold, local_window, sliding_window, rows, DROPC, p32s, drop_scale,
                                              BN, DOT_SCAN, IEEE, HAS_SEG, DROPOUT)
        if INTERIOR:  # a constexpr: the shipped kernels compile no second loop
            for it in range(0, interior - first):
                m_i, l_i, acc, carry = _fwd_block(q, g2, m_i, l_i, acc, carry, interior - 1 - it, offs_m, offs_d,
                                                  mask_d, q_pos, seg_q, K, V, SEGK, b, k_base, v_base, sks, svs, SQ,
                                                  SK, scale, threshold, local_window, sliding_window, rows, DROPC,
                                                  p32s, drop_scale, BN, DOT_SCAN, IEEE, HAS_SEG, DROPOUT, False)
        k_start = first
    has_key = l_i > 0
    safe_l = tl.where(has_key, l_i, 1.0)
    out = acc / safe_l[:, None]
    lse = tl.where(has_key, (m_i + tl.log2(safe_l)) * LN2, float("inf"))
    tl.store(O + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=row_mask)
    tl.store(LSE + bh * SQ + offs_m, lse, mask=mask_m)
    tl.store(CNT + bh * SQ + offs_m, carry, mask=mask_m)
    tl.store(MAX + bh * SQ + offs_m, m_i, mask=mask_m)  # base 2, for the keep surrogate's backward
    tl.store(KSTART + bh * tl.num_programs(0) + pid_m, k_start)


@triton.jit
def _bwd_block(q, do, g, g2, lse2, delta, dq, dg, carry, right, block, offs_m, offs_d, mask_d, q_pos, seg_q, K, V, SEGK,
               DK, DV, b, bh, k_base, v_base, sks, svs, SQ, SK, scale, threshold, local_window, sliding_window, rows,
               DROPC, p32s, drop_scale, tau, cap2, has_key, top2, gap2, total, D: tl.constexpr, BN: tl.constexpr,
               DOT_SCAN: tl.constexpr, IEEE: tl.constexpr, HAS_SEG: tl.constexpr, DROPOUT: tl.constexpr,
               SURROGATE: tl.constexpr, MASKED: tl.constexpr):
    """Key block ``block`` of the backward: its tile recomputed, dq, dg, the carry and the surrogate's running sum
    updated, and its dK/dV partials added (an interior block without MASKED: ``_tile``)."""
    offs_n = block * BN + tl.arange(0, BN)
    kv_mask = (offs_n < SK)[:, None] & mask_d[None, :]
    k = tl.load(K + k_base + offs_n[:, None] * sks + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + v_base + offs_n[:, None] * svs + offs_d[None, :], mask=kv_mask, other=0.0)
    seg_k = _key_segments(SEGK, b, offs_n, SK, HAS_SEG)
    if DROPOUT:
        fac = _drop_factors(rows, DROPC, offs_n, SK, p32s, drop_scale)
    else:
        fac = 1.0
    z2, keep_f, count, s, decided = _tile(q, k, g2, carry, offs_m, offs_n, q_pos, seg_q, seg_k, SQ, SK, scale,
                                          threshold, local_window, sliding_window, fac, BN, DOT_SCAN, IEEE,
                                          HAS_SEG, DROPOUT, MASKED)
    if SURROGATE:  # computed first, so that the scores are dead before the gradient's tiles are live
        sig = 1.0 / (1.0 + tl.exp((threshold - s) / tau))
        slope = tl.where(decided & has_key[:, None], sig * (1.0 - sig) / tau, 0.0)
        # The would-be weight of every key, kept or not: exp(min(l - m, cap) - (L - m)), times the slope.
        would2 = s * LOG2E + g2[:, None] * count
        if DROPOUT:
            would2 = would2 * fac
        slope_weight = slope * tl.exp2(tl.minimum(would2 - top2[:, None], cap2) - gap2[:, None])
        slope_gate = slope * g[:, None]
    p = tl.exp2(z2 - lse2[:, None])  # 0 off the keep mask and on rows with no kept key
    dp = _dot(do, tl.trans(v), IEEE) - delta[:, None]
    ds = p * dp  # gradient of the natural-log (dropped) logits
    if DROPOUT:
        ds = ds * fac  # ... and of the logits before their dropout factor
    dg += tl.sum(ds * count, 1)
    dscore = ds
    if SURROGATE:
        suffix = tl.cumsum(ds, axis=1, reverse=True) - ds + right[:, None]  # dZ of the keys right of each
        dscore = ds + slope_weight * dp + slope_gate * (total[:, None] - suffix)
        right += tl.sum(ds, 1)
    dq += _dot(dscore.to(k.dtype), k, IEEE)
    dkv = bh * SK * D + offs_n[:, None] * D + offs_d[None, :]
    # dV is issued before dK is computed, so the two (BN, D) partials never coexist in registers.
    tl.atomic_add(DV + dkv, _dot(tl.trans(p.to(do.dtype)), do, IEEE), mask=kv_mask)
    tl.atomic_add(DK + dkv, _dot(tl.trans(dscore.to(q.dtype)), q, IEEE) * scale, mask=kv_mask)
    carry += tl.sum(keep_f, 1)
    return dq, dg, carry, right


@triton.jit
def tra_bwd_kernel(
    Q, K, V, G, DO, LSE, DELTA, KSTART, DQ, DK, DV, DG, SEGK, SEGQ, QSTART, MAX, DROPR, DROPC,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sdob, sdoh, sdos,
    H, SQ, SK, scale, threshold, local_window, sliding_window, n_fwd_blocks, p32s, drop_scale, tau, cap2,
    D: tl.constexpr, BLOCK_D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, FWD_BM: tl.constexpr,
    DOT_SCAN: tl.constexpr, IEEE: tl.constexpr, HAS_SEG: tl.constexpr, DROPOUT: tl.constexpr,
    SURROGATE: tl.constexpr, INTERIOR: tl.constexpr = False,
):
    scale, threshold, drop_scale, tau, cap2 = _fp32(scale), _fp32(threshold), _fp32(drop_scale), _fp32(tau), _fp32(cap2)
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, BLOCK_D)
    mask_m = offs_m < SQ
    mask_d = offs_d < D
    row_mask = mask_m[:, None] & mask_d[None, :]
    q_pos = offs_m + (SK - SQ)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :], mask=row_mask, other=0.0)
    do = tl.load(DO + b * sdob + h * sdoh + offs_m[:, None] * sdos + offs_d[None, :], mask=row_mask, other=0.0)
    g = tl.load(G + bh * SQ + offs_m, mask=mask_m, other=0.0)
    g2 = g * LOG2E
    lse2 = tl.load(LSE + bh * SQ + offs_m, mask=mask_m, other=float("inf")) * LOG2E
    delta = tl.load(DELTA + bh * SQ + offs_m, mask=mask_m, other=0.0)
    dq = tl.zeros([BM, BLOCK_D], tl.float32)
    dg = tl.zeros([BM], tl.float32)
    carry = tl.zeros([BM], tl.float32)
    k_base = b * skb + h * skh
    v_base = b * svb + h * svh
    n_blocks = tl.minimum(pid_m * BM + BM - 1 + SK - SQ, SK - 1) // BN + 1
    # The lowest key block visited by the forward query block that holds these rows (BM | FWD_BM); blocks
    # below this program's own first block are outside the sliding window or the documents of all its rows.
    k_start = tl.load(KSTART + bh * n_fwd_blocks + (pid_m * BM) // FWD_BM)
    k_start = tl.maximum(k_start, _first_block(pid_m * BM + SK - SQ, sliding_window, BN))
    seg_q, q_start, k_start = _query_segments(SEGQ, QSTART, b, offs_m, k_start, SQ, SK, BN, HAS_SEG)
    rows = _row_keys(DROPR, bh, offs_m, SQ, DROPOUT)
    if SURROGATE:  # docs/backward.md, section 7
        has_key = lse2 < float("inf")
        m2 = tl.load(MAX + bh * SQ + offs_m, mask=mask_m, other=0.0)
        top2 = tl.where(has_key, m2, 0.0)
        gap2 = tl.where(has_key, lse2 - m2, 0.0)  # log2 of the normaliser
        total = tl.zeros([BM], tl.float32)  # T_i: 0 without dropout
        if DROPOUT:  # a first pass: the kept keys whose logit was dropped, their number and sum of dO . v
            n_dropped = tl.zeros([BM], tl.float32)
            dp_dropped = tl.zeros([BM], tl.float32)
            for it in range(0, n_blocks - k_start):
                offs_n = (n_blocks - 1 - it) * BN + tl.arange(0, BN)
                kv_mask = (offs_n < SK)[:, None] & mask_d[None, :]
                k = tl.load(K + k_base + offs_n[:, None] * sks + offs_d[None, :], mask=kv_mask, other=0.0)
                v = tl.load(V + v_base + offs_n[:, None] * svs + offs_d[None, :], mask=kv_mask, other=0.0)
                seg_k = _key_segments(SEGK, b, offs_n, SK, HAS_SEG)
                fac = _drop_factors(rows, DROPC, offs_n, SK, p32s, drop_scale)
                z2, keep_f, count, s, decided = _tile(q, k, g2, carry, offs_m, offs_n, q_pos, seg_q, seg_k, SQ, SK,
                                                      scale, threshold, local_window, sliding_window, fac, BN,
                                                      DOT_SCAN, IEEE, HAS_SEG, DROPOUT)
                dropped_kept = tl.where(fac == 0.0, keep_f, 0.0)
                n_dropped += tl.sum(dropped_kept, 1)
                dp_dropped += tl.sum(dropped_kept * _dot(do, tl.trans(v), IEEE), 1)
            total = tl.where(has_key, drop_scale * tl.exp2(-lse2) * (n_dropped * delta - dp_dropped), 0.0)
        right = tl.zeros([BM], tl.float32)  # R: the sum of dZ over the keys right of the current block
    if not SURROGATE:  # unread without the surrogate
        has_key = lse2 < float("inf")
        top2 = lse2
        gap2 = lse2
        total = lse2
        right = lse2
    interior = _interior_end(pid_m * BM + SK - SQ, k_start, n_blocks, local_window, sliding_window, BN, INTERIOR,
                             HAS_SEG)
    for it in range(0, n_blocks - interior):
        dq, dg, carry, right = _bwd_block(q, do, g, g2, lse2, delta, dq, dg, carry, right, n_blocks - 1 - it, offs_m,
                                          offs_d, mask_d, q_pos, seg_q, K, V, SEGK, DK, DV, b, bh, k_base, v_base, sks,
                                          svs, SQ, SK, scale, threshold, local_window, sliding_window, rows, DROPC,
                                          p32s, drop_scale, tau, cap2, has_key, top2, gap2, total, D, BN, DOT_SCAN,
                                          IEEE, HAS_SEG, DROPOUT, SURROGATE, True)
    if INTERIOR:  # a constexpr: the shipped kernels compile no second loop
        for it in range(0, interior - k_start):
            dq, dg, carry, right = _bwd_block(q, do, g, g2, lse2, delta, dq, dg, carry, right, interior - 1 - it,
                                              offs_m, offs_d, mask_d, q_pos, seg_q, K, V, SEGK, DK, DV, b, bh, k_base,
                                              v_base, sks, svs, SQ, SK, scale, threshold, local_window, sliding_window,
                                              rows, DROPC, p32s, drop_scale, tau, cap2, has_key, top2, gap2, total, D,
                                              BN, DOT_SCAN, IEEE, HAS_SEG, DROPOUT, SURROGATE, False)
    tl.store(DQ + bh * SQ * D + offs_m[:, None] * D + offs_d[None, :], dq * scale, mask=row_mask)
    tl.store(DG + bh * SQ + offs_m, dg, mask=mask_m)
