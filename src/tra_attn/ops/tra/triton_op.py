"""Autograd wrapper and launch configuration of the fused Triton TRA kernels.

Runs on CUDA tensors, or on CPU tensors through the Triton interpreter (``TRITON_INTERPRET=1``,
set before triton is imported), which is how CI tests the kernels without a GPU.
"""

from __future__ import annotations

import math

import torch
import triton

from .chunked import score_bound
from .segments import Segments, segments_of
from .triton_kernels import tra_bwd_kernel, tra_fwd_kernel

# Per padded head dim: the key-block width BN (shared, so that both passes visit the same key blocks
# and recompute identical tiles) and (BM, warps, stages) of the forward and of the backward; the
# backward BM divides the forward one. Chosen free of register spills on sm_90a, with the loads
# software-pipelined (``python -m tra_attn.ops.tra.triton_aot``); not yet tuned on a GPU.
CONFIGS: dict[int, dict] = {
    16: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 4, 2)},
    32: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 8, 2)},
    64: {"BN": 32, "fwd": (128, 8, 3), "bwd": (64, 8, 2)},
    128: {"BN": 32, "fwd": (128, 8, 2), "bwd": (64, 8, 2)},
}
DOT_SCAN = False  # in-tile reverse count: tl.cumsum (False) or a triangular matmul (True)


def block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _segment_args(segments: Segments | None, dummy: torch.Tensor) -> tuple:
    """The kernels' SEGK, SEGQ, QSTART pointers (an unread int32 tensor without segments) and HAS_SEG."""
    return (*(segments or (dummy,) * 3), segments is not None)


def forward_stats(
    q,
    k,
    v,
    log_gate,
    scale: float,
    threshold: float,
    prune_tau: float | None = None,
    local_window=0,
    sliding_window=0,
    segments: Segments | None = None,
):
    """Run the forward kernel: (out, lse, kept keys per row, lowest key block visited per query block).

    ``segments`` as ``segments.segments_of`` gives them (or None): keys are kept only in the query's document."""
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
    tau2 = (prune_tau if prune else 0.0) * math.log2(math.e)
    *seg, has_seg = _segment_args(segments, k_start)
    # fmt: off
    tra_fwd_kernel[grid](
        q, k, v, gate, smax, out, lse, count, k_start, *seg,
        *_strides(q), *_strides(k), *_strides(v), *_strides(out),
        h, sq, sk, scale, threshold, tau2, local_window, sliding_window,
        D=d, BLOCK_D=bd, BM=bm, BN=bn, PRUNE=prune, DOT_SCAN=DOT_SCAN, IEEE=q.dtype == torch.float32,
        HAS_SEG=has_seg, num_warps=warps, num_stages=stages,
    )
    # fmt: on
    return out, lse, count, k_start


class TritonTRA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_gate, scale: float, threshold: float, prune_tau: float | None, windows, segments):
        out, lse, _, k_start = forward_stats(q, k, v, log_gate, scale, threshold, prune_tau, *windows, segments)
        ctx.save_for_backward(q, k, v, log_gate, out, lse, k_start)
        ctx.scale, ctx.threshold, ctx.windows, ctx.segments = scale, threshold, windows, segments
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, log_gate, out, lse, k_start = ctx.saved_tensors
        b, h, sq, d = q.shape
        sk = k.shape[2]
        bd = block_d(d)
        bn, (bm, warps, stages), fwd_bm = CONFIGS[bd]["BN"], CONFIGS[bd]["bwd"], CONFIGS[bd]["fwd"][0]
        q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
        grad_out = _last_dim_contiguous(grad_out.to(q.dtype))
        delta = (grad_out.float() * out.float()).sum(-1).contiguous()
        dq = torch.empty((b, h, sq, d), dtype=torch.float32, device=q.device)
        dk = torch.zeros((b, h, sk, d), dtype=torch.float32, device=q.device)
        dv = torch.zeros((b, h, sk, d), dtype=torch.float32, device=q.device)
        dgate = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
        grid = (triton.cdiv(sq, bm), b * h)
        *seg, has_seg = _segment_args(ctx.segments, k_start)
        # fmt: off
        tra_bwd_kernel[grid](
            q, k, v, log_gate.float().contiguous(), grad_out, lse, delta, k_start, dq, dk, dv, dgate, *seg,
            *_strides(q), *_strides(k), *_strides(v), *_strides(grad_out),
            h, sq, sk, ctx.scale, ctx.threshold, *ctx.windows, k_start.shape[1],
            D=d, BLOCK_D=bd, BM=bm, BN=bn, FWD_BM=fwd_bm, DOT_SCAN=DOT_SCAN, IEEE=q.dtype == torch.float32,
            HAS_SEG=has_seg, num_warps=warps, num_stages=stages,
        )
        # fmt: on
        grads = dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dgate.to(log_gate.dtype)
        return *grads, None, None, None, None, None


def tra_triton(
    q,
    k,
    v,
    log_gate,
    scale: float,
    threshold: float,
    prune_tau: float | None = None,
    local_window=0,
    sliding_window=0,
    segment_ids=None,
):
    """Fused TRA for q (B,H,Sq,D), k/v (B,H,Sk,D), log_gate (B,H,Sq); output in q's dtype.

    ``segment_ids`` (B, Sk) int32 (``ops/varlen.py``, or None): keys are kept only within the query's document."""
    if q.numel() == 0:  # no program to launch: an empty output that still joins the graph
        return q * 0
    windows = (int(local_window), int(sliding_window))
    segments = segments_of(segment_ids, q.shape[2])
    return TritonTRA.apply(q, k, v, log_gate, float(scale), float(threshold), prune_tau, windows, segments)
