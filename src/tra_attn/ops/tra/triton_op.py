"""Autograd wrapper and launch configuration of the fused Triton TRA kernels.

Runs on CUDA tensors, or on CPU tensors through the Triton interpreter (``TRITON_INTERPRET=1``,
set before triton is imported), which is how CI tests the kernels without a GPU.
"""

from __future__ import annotations

import math
import os

import torch
import triton

from .chunked import score_bound
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .dropout import LogitDropout
from .segments import Segments
from .triton_kernels import tra_bwd_kernel, tra_fwd_kernel

# Per padded head dim: the key-block width BN (shared, so that both passes visit the same key blocks
# and recompute identical tiles) and (BM, warps, stages) of the forward and of the backward; the
# backward BM divides the forward one. Chosen free of register spills on sm_90a, with the loads
# software-pipelined (``python -m tra_attn.ops.tra.triton_aot``); not yet tuned on a GPU. The keep
# surrogate's backward holds more tiles at once: at D = 128 it runs 32 rows per program (``bwd_surrogate``;
# 64 rows spill), below the 64 rows of a wgmma, so it uses the older mma tensor-core instructions.
CONFIGS: dict[int, dict] = {
    16: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 4, 2)},
    32: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 8, 2)},
    64: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 8, 2)},
    128: {"BN": 32, "fwd": (128, 8, 2), "bwd": (64, 8, 2), "bwd_surrogate": (32, 8, 2)},
}
# Kernel variants, opt-in until a GPU measures them faster (benchmarks/triton_cost_model.py counts what each
# issues): the in-tile reverse count as a triangular matmul instead of tl.cumsum (TRA_TRITON_DOT_SCAN=1), and the
# key blocks left of every row's local window in a loop of their own without the mask's arithmetic
# (TRA_TRITON_INTERIOR=1; not with a sliding window or documents). Both compute the same values.
DOT_SCAN = os.environ.get("TRA_TRITON_DOT_SCAN") == "1"
INTERIOR = os.environ.get("TRA_TRITON_INTERIOR") == "1"
# log2 of the surrogate's cap on a would-be weight (surrogate.py: half the largest fp32 exponent), in base 2.
SURROGATE_CAP2 = math.log2(torch.finfo(torch.float32).max) / 2


def block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _segment_args(segments: Segments | None, dummy: torch.Tensor) -> tuple:
    """The kernels' SEGK, SEGQ, QSTART pointers (an unread int32 tensor without segments) and HAS_SEG."""
    return (*(segments or (dummy,) * 3), segments is not None)


def _dropout_args(dropout: LogitDropout | None, dummy: torch.Tensor) -> tuple:
    """The kernels' DROPR, DROPC pointers (an unread int32 tensor without dropout), p32 - 2^31, the kept
    logits' factor, and DROPOUT."""
    if dropout is None:
        return dummy, dummy, 0, 1.0, False
    return dropout.rows, dropout.cols, dropout.p32 - 2**31, dropout.scale, True


def forward_stats(
    q,
    k,
    v,
    log_gate,
    *,
    scale: float,
    keep: KeepRule,
    segments: Segments | None = None,
    prune_tau: float | None = None,
):
    """Run the forward kernel: (out, lse, kept keys per row, lowest key block visited per query block).

    ``segments``, the per-key and per-query form of the documents (``Documents.segments``, or None): keys are kept
    only in the query's document. ``split_kv.py`` calls it per split."""
    return _forward(q, k, v, log_gate, scale, keep.threshold, prune_tau, *keep.windows, segments)[:4]


def _forward(
    q, k, v, log_gate, scale, threshold, prune_tau, local_window, sliding_window, segments, dropout=None
) -> tuple:
    """``forward_stats``, then the running maximum of the kept logits per row (base 2), with ``dropout`` (a
    ``dropout.LogitDropout`` with its row keys flattened to (B * H, Sq)) or without."""
    b, h, sq, d = q.shape
    sk = k.shape[2]
    bd = block_d(d)
    bn, (bm, warps, stages) = CONFIGS[bd]["BN"], CONFIGS[bd]["fwd"]
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    gate = log_gate.float().contiguous()
    prune = prune_tau is not None
    smax = score_bound(q.float(), k.float(), scale).contiguous() if prune else gate  # unused without pruning
    out = torch.empty((b, h, sq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    count = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(sq, bm), b * h)
    k_start = torch.empty((b * h, grid[0]), dtype=torch.int32, device=q.device)
    row_max = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    tau2 = (prune_tau if prune else 0.0) * math.log2(math.e)
    *seg, has_seg = _segment_args(segments, k_start)
    *drop, has_dropout = _dropout_args(dropout, k_start)
    # fmt: off
    tra_fwd_kernel[grid](
        q, k, v, gate, smax, out, lse, count, k_start, *seg, row_max, drop[0], drop[1],
        *_strides(q), *_strides(k), *_strides(v), *_strides(out),
        h, sq, sk, scale, threshold, tau2, local_window, sliding_window, drop[2], drop[3],
        D=d, BLOCK_D=bd, BM=bm, BN=bn, PRUNE=prune, DOT_SCAN=DOT_SCAN, IEEE=q.dtype == torch.float32,
        HAS_SEG=has_seg, DROPOUT=has_dropout, INTERIOR=INTERIOR, num_warps=warps, num_stages=stages,
    )
    # fmt: on
    return out, lse, count, k_start, row_max


class TritonTRA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_gate, scale: float, threshold: float, prune_tau, windows, segments, training):
        tau, dropout = training
        out, lse, _, k_start, row_max = _forward(
            q, k, v, log_gate, scale, threshold, prune_tau, *windows, segments, dropout
        )
        ctx.save_for_backward(q, k, v, log_gate, out, lse, k_start, row_max)
        ctx.scale, ctx.threshold, ctx.windows, ctx.segments = scale, threshold, windows, segments
        ctx.training = training
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, log_gate, out, lse, k_start, row_max = ctx.saved_tensors
        tau, dropout = ctx.training
        b, h, sq, d = q.shape
        sk = k.shape[2]
        bd = block_d(d)
        config = CONFIGS[bd]
        bm, warps, stages = config.get("bwd_surrogate", config["bwd"]) if tau else config["bwd"]
        bn, fwd_bm = config["BN"], config["fwd"][0]
        q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
        grad_out = _last_dim_contiguous(grad_out.to(q.dtype))
        delta = (grad_out.float() * out.float()).sum(-1).contiguous()
        dq = torch.empty((b, h, sq, d), dtype=torch.float32, device=q.device)
        dk = torch.zeros((b, h, sk, d), dtype=torch.float32, device=q.device)
        dv = torch.zeros((b, h, sk, d), dtype=torch.float32, device=q.device)
        dgate = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
        grid = (triton.cdiv(sq, bm), b * h)
        *seg, has_seg = _segment_args(ctx.segments, k_start)
        *drop, has_dropout = _dropout_args(dropout, k_start)
        # fmt: off
        tra_bwd_kernel[grid](
            q, k, v, log_gate.float().contiguous(), grad_out, lse, delta, k_start, dq, dk, dv, dgate, *seg,
            row_max, drop[0], drop[1],
            *_strides(q), *_strides(k), *_strides(v), *_strides(grad_out),
            h, sq, sk, ctx.scale, ctx.threshold, *ctx.windows, k_start.shape[1], drop[2], drop[3], tau or 1.0,
            SURROGATE_CAP2,
            D=d, BLOCK_D=bd, BM=bm, BN=bn, FWD_BM=fwd_bm, DOT_SCAN=DOT_SCAN, IEEE=q.dtype == torch.float32,
            HAS_SEG=has_seg, DROPOUT=has_dropout, SURROGATE=bool(tau), INTERIOR=INTERIOR, num_warps=warps,
            num_stages=stages,
        )
        # fmt: on
        grads = dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dgate.to(log_gate.dtype)
        return *grads, None, None, None, None, None, None


def tra_triton(
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
):
    """Fused TRA for q (B,H,Sq,D), k/v (B,H,Sk,D), log_gate (B,H,Sq); output in q's dtype.

    ``keep`` and ``documents`` decide the kept keys (a key of another document or padding is never kept); every
    aid is served (the keep surrogate, the logit dropout with the mask of ``aids.dropout_seed``), as in the op;
    neither with ``prune_tau``, the early exit."""
    if prune_tau is not None and aids.active:
        raise ValueError("tra_triton: prune_tau does not combine with keep_surrogate or logit_dropout")
    if q.numel() == 0:  # no program to launch: an empty output that still joins the graph
        return q * 0
    segments = documents.segments(q.shape[2])
    training = aids.prepared(keep, q, k.shape[2])
    return TritonTRA.apply(q, k, v, log_gate, float(scale), keep.threshold, prune_tau, keep.windows, segments, training)
