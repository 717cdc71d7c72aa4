"""TRA on the fused CPU kernels (``cpu/tra_cpu.cpp``, built by ``cpu_build.py``): the op's ``impl="cpu"``.

It serves what the chunked path serves but the early exit: the threshold, both windows, documents and padding,
the keep surrogate and the logit dropout (the same hash mask), rows with no kept key, fp32 and fp64 (bf16 and
fp16 run in fp32, as everywhere), and RMS-normalises q and k in the kernels when asked (``norm_eps``). Forward and
backward are two ``torch.library`` custom ops, so torch.compile keeps them in its graph; their autograd formula is
the kernels' backward. The kernels read q, k, v and write the output and the gradients in the tensors' own
layout, any (B, H, S, D) whose rows of D are contiguous: a projection's output split into heads, (B, S, H, D) in
memory, is read in place and its gradients come back in that layout, so no transpose is copied on either side.
A call of at most 4 queries without dropout (decoding) runs one row per thread pass over its keys instead of the
tiled kernel. docs/cpu_op.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools

import torch

from ..masks import compute_dtype
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids
from .cpu_build import library
from .dropout import LogitDropout


class Rows(ctypes.Structure):
    """The kernels' ``Rows`` (cpu/params.h): element strides of a (B, H, S, D) tensor's batch, head and row."""

    _fields_ = [("b", ctypes.c_int64), ("h", ctypes.c_int64), ("s", ctypes.c_int64)]


class Params(ctypes.Structure):
    """The kernels' ``Params`` (cpu/params.h), field for field."""

    _fields_ = [
        ("n", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("sq", ctypes.c_int64),
        ("sk", ctypes.c_int64),
        ("d", ctypes.c_int64),
        ("scale", ctypes.c_double),
        ("threshold", ctypes.c_double),
        ("local_window", ctypes.c_int64),
        ("sliding_window", ctypes.c_int64),
        ("seg_keys", ctypes.c_void_p),
        ("seg_queries", ctypes.c_void_p),
        ("seg_starts", ctypes.c_void_p),
        ("drop_rows", ctypes.c_void_p),
        ("drop_cols", ctypes.c_void_p),
        ("drop_p32", ctypes.c_int64),
        ("drop_scale", ctypes.c_double),
        ("tau", ctypes.c_double),
        ("threads", ctypes.c_int64),
        ("q_rows", Rows),
        ("k_rows", Rows),
        ("v_rows", Rows),
        ("o_rows", Rows),
        ("do_rows", Rows),
        ("dq_rows", Rows),
        ("dk_rows", Rows),
        ("dv_rows", Rows),
        ("checked", ctypes.c_int64),
        ("tiles", ctypes.c_void_p),
        ("norm_eps", ctypes.c_double),
    ]


_tile_counter: ctypes.c_int64 | None = None  # set by counting_tiles


@contextlib.contextmanager
def counting_tiles():
    """Count the (key block, query block) tiles the tiled forward and backward compute inside the block: yields
    a function that returns the count so far. Diagnostics (tests, benchmarks): how far the walk goes before no key
    further left can carry weight (docs/cpu_op.md)."""
    global _tile_counter
    counter = _tile_counter = ctypes.c_int64(0)
    try:
        yield lambda: counter.value
    finally:
        _tile_counter = None


def pointer(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def rows(t: torch.Tensor | None) -> Rows:
    """The row layout of a (B, H, S, D) tensor with contiguous rows (``readable``)."""
    return Rows() if t is None else Rows(t.stride(0), t.stride(1), t.stride(2))


def readable(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` (B, H, S, D) in ``dtype`` as the kernels read it: itself if its rows of D are contiguous, whatever the
    strides of B, H and S (a projection split into heads, a slice of a KV cache), else a copy."""
    t = t if t.dtype == dtype else t.to(dtype)
    return t if t.stride(3) == 1 or t.shape[3] <= 1 else t.contiguous()


@functools.cache
def kernel(name: str, dtype: torch.dtype):
    """The C function ``tra_<name>_<f32|f64>`` with its argument types (a pointer to Params, then pointers)."""
    function = getattr(library(), f"tra_{name}_{'f64' if dtype == torch.float64 else 'f32'}")
    count = {"forward": 9, "backward": 14}[name]
    function.argtypes = [ctypes.POINTER(Params)] + [ctypes.c_void_p] * count
    function.restype = ctypes.c_int
    return function


def params(q, k, v, scale, threshold, local, sliding, segments, drop_rows, drop_cols, p32, drop_scale, tau, norm_eps,
           out=None, grads=(None, None, None, None), checked=False):  # fmt: skip
    """The kernels' Params of a call on (B, H, S, D) tensors: ``out`` the output (forward) or the one the backward
    reads, ``grads`` (dout, dq, dk, dv) in the backward."""
    b, h, sq, d = q.shape
    keys, queries, starts = segments
    dout, dq, dk, dv = grads
    return Params(
        b * h, h, sq, k.shape[2], d, scale, threshold, local, sliding, pointer(keys), pointer(queries), pointer(starts),
        pointer(drop_rows), pointer(drop_cols), p32, drop_scale, tau, torch.get_num_threads(), rows(q), rows(k),
        rows(v), rows(out), rows(dout), rows(dq), rows(dk), rows(dv), int(checked),
        None if _tile_counter is None else ctypes.addressof(_tile_counter), norm_eps,
    )  # fmt: skip


def run_forward(q, k, v, log_gate, seg_keys, seg_queries, seg_starts, drop_rows, drop_cols, scale, threshold,
                local_window, sliding_window, drop_p32, drop_scale, tau, norm_eps, checked=False):  # fmt: skip
    """The forward kernel (see ``cpu_forward``): (out, lse, m, dropped values, dropped count), the last two None
    unless dropout and the surrogate are both on. ``checked``: a decoding call whose rows apply the non-finite
    contract themselves (``decode_row`` in the kernels)."""
    b, h, sq, d = q.shape
    out = torch.empty_like(q)  # q's layout: a projection's split into heads gives one the output projection reads
    lse = torch.empty((b * h, sq), dtype=q.dtype)
    m = torch.empty((b * h, sq), dtype=q.dtype)
    sums = drop_rows is not None and tau > 0
    dvals = torch.empty((b * h, sq, d), dtype=q.dtype) if sums else None
    dcount = torch.empty((b * h, sq), dtype=q.dtype) if sums else None
    p = params(q, k, v, scale, threshold, local_window, sliding_window, (seg_keys, seg_queries, seg_starts),
               drop_rows, drop_cols, drop_p32, drop_scale, tau, norm_eps, out=out, checked=checked)  # fmt: skip
    kernel("forward", q.dtype)(p, *map(pointer, (q, k, v, log_gate, out, lse, m, dvals, dcount)))
    return out, lse, m, dvals, dcount


@torch.library.custom_op("tra_attn::cpu_forward", mutates_args=(), device_types="cpu")
def cpu_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    seg_keys: torch.Tensor | None,
    seg_queries: torch.Tensor | None,
    seg_starts: torch.Tensor | None,
    drop_rows: torch.Tensor | None,
    drop_cols: torch.Tensor | None,
    scale: float,
    threshold: float,
    local_window: int,
    sliding_window: int,
    drop_p32: int,
    drop_scale: float,
    tau: float,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, lse, m, dropped values, dropped count) of q (B, H, Sq, D), k, v (B, H, Sk, D), each with contiguous
    rows, and log_gate (B * H, Sq) contiguous: out in q's layout, lse +inf and m -inf on rows with no kept key;
    the dropped sums (the kept keys whose logit the dropout zeroed: the surrogate's backward reads them) are empty
    unless both dropout and the surrogate are on."""
    out, lse, m, dvals, dcount = run_forward(q, k, v, log_gate, seg_keys, seg_queries, seg_starts, drop_rows,
                                             drop_cols, scale, threshold, local_window, sliding_window, drop_p32,
                                             drop_scale, tau, norm_eps)  # fmt: skip
    none = q.new_empty((0,))
    return out, lse, m, none if dvals is None else dvals, none.clone() if dcount is None else dcount


@cpu_forward.register_fake
def _(q, k, v, log_gate, seg_keys, seg_queries, seg_starts, drop_rows, drop_cols, scale, threshold, local_window,
      sliding_window, drop_p32, drop_scale, tau, norm_eps):  # fmt: skip
    b, h, sq, d = q.shape
    sums = drop_rows is not None and tau > 0
    return (
        torch.empty_like(q),
        q.new_empty((b * h, sq)),
        q.new_empty((b * h, sq)),
        q.new_empty((b * h, sq, d) if sums else (0,)),
        q.new_empty((b * h, sq) if sums else (0,)),
    )


@torch.library.custom_op("tra_attn::cpu_backward", mutates_args=(), device_types="cpu")
def cpu_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    m: torch.Tensor,
    dvals: torch.Tensor,
    dcount: torch.Tensor,
    grad_out: torch.Tensor,
    seg_keys: torch.Tensor | None,
    seg_queries: torch.Tensor | None,
    seg_starts: torch.Tensor | None,
    drop_rows: torch.Tensor | None,
    drop_cols: torch.Tensor | None,
    scale: float,
    threshold: float,
    local_window: int,
    sliding_window: int,
    drop_p32: int,
    drop_scale: float,
    tau: float,
    norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv, dlog_gate) from the forward's statistics and the output's gradient, each gradient in its
    input's layout."""
    dq, dk, dv, dg = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(log_gate)
    grad_out = readable(grad_out, q.dtype)
    sums = (dvals, dcount) if dvals.numel() > 0 else (None, None)
    p = params(q, k, v, scale, threshold, local_window, sliding_window, (seg_keys, seg_queries, seg_starts),
               drop_rows, drop_cols, drop_p32, drop_scale, tau, norm_eps, out=out,
               grads=(grad_out, dq, dk, dv))  # fmt: skip
    tensors = (q, k, v, log_gate, out, lse, m, *sums, grad_out, dq, dk, dv, dg)
    kernel("backward", q.dtype)(p, *map(pointer, tensors))
    return dq, dk, dv, dg


@cpu_backward.register_fake
def _(q, k, v, log_gate, *rest):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(log_gate)


OPTIONS = 8  # the forward's arguments after its tensors q, k, v, log_gate and the five optional ones


def _setup_context(ctx, inputs, output):
    q, k, v, log_gate, *optional = inputs[:9]
    out, lse, m, dvals, dcount = output
    ctx.save_for_backward(q, k, v, log_gate, out, lse, m, dvals, dcount, *(t for t in optional if t is not None))
    ctx.present = [t is not None for t in optional]
    ctx.options = inputs[9:]


def _backward(ctx, grad_out, *unused):
    q, k, v, log_gate, out, lse, m, dvals, dcount, *given = ctx.saved_tensors
    given = iter(given)
    optional = [next(given) if present else None for present in ctx.present]
    dq, dk, dv, dg = cpu_backward(q, k, v, log_gate, out, lse, m, dvals, dcount, grad_out, *optional, *ctx.options)
    return (dq, dk, dv, dg) + (None,) * (5 + OPTIONS)


cpu_forward.register_autograd(_backward, setup_context=_setup_context)


def tra_cpu(
    q,
    k,
    v,
    log_gate,
    *,
    scale: float,
    keep: KeepRule,
    documents: Documents = NO_DOCUMENTS,
    aids: TrainingAids = NO_AIDS,
    norm_eps: float = 0.0,
):
    """TRA on the fused CPU kernels for q (B, H, Sq, D), k, v (B, H, Sk, D), log_gate (B, H, Sq) on the CPU;
    output in q's dtype and layout. ``keep`` and ``documents`` decide the kept keys, every aid is served (the
    dropout mask of ``aids.dropout_seed``; the surrogate's forward is exact TRA); ``norm_eps`` > 0 RMS-normalises q
    and k per row first, in the kernels; finite inputs (``nonfinite.sanitize``)."""
    (b, h, sq, _), dtype = q.shape, q.dtype
    sk = k.shape[2]
    cdt = compute_dtype(dtype)
    q, k, v = (readable(t, cdt) for t in (q, k, v))
    flat_g = log_gate.reshape(b * h, sq).to(cdt).contiguous()
    segments = documents.segments(sq)
    seg = (None, None, None) if segments is None else tuple(segments)
    drop_rows = drop_cols = None
    p32, drop_scale = 0, 1.0
    if aids.logit_dropout:
        dropout = LogitDropout(aids.logit_dropout, aids.dropout_seed, b, h, sq, sk, q.device)
        drop_rows, drop_cols = dropout.rows.reshape(b * h, sq).contiguous(), dropout.cols.contiguous()
        p32, drop_scale = dropout.p32, dropout.scale
    args = (q, k, v, flat_g, *seg, drop_rows, drop_cols, float(scale), keep.threshold, keep.local_window,
            keep.sliding_window, p32, drop_scale, aids.surrogate_for(keep), float(norm_eps))  # fmt: skip
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, flat_g))
    # Without autograd to record, the kernel itself: the custom op's dispatch costs about 20 us a call.
    forward = cpu_forward if needs_grad or torch.compiler.is_compiling() else run_forward
    out = forward(*args)[0]
    return out if cdt == dtype else out.to(dtype)


def tra_cpu_decode(q, k, v, log_gate, *, scale: float, keep: KeepRule):
    """``tra_cpu`` with ``checked`` for a decoding step (one query per row, no gradient, no documents, no sliding
    window, no aid): the kernel's rows apply the non-finite contract, and nothing else runs in Python that the
    step can do without (a decoding step is a few microseconds of work per layer: each tensor operation here
    costs a tenth of the kernel at 2k of context). Keys and values are read in place from the cache's buffer."""
    dtype = q.dtype
    cdt = compute_dtype(dtype)
    q, k, v = (readable(t, cdt) for t in (q, k, v))
    b, h, sq, d = q.shape
    gate = (log_gate if log_gate.dtype == cdt else log_gate.to(cdt)).contiguous()
    out, stats = torch.empty_like(q), torch.empty((2, b * h * sq), dtype=cdt)
    # Params built positionally, the rows as tuples: a third of ``params``'s cost, which a step pays per layer.
    p = Params(b * h, h, sq, k.shape[2], d, scale, keep.threshold, keep.local_window, 0, None, None, None, None, None,
               0, 1.0, 0.0, torch.get_num_threads(), q.stride()[:3], k.stride()[:3], v.stride()[:3],
               out.stride()[:3], checked=1)  # fmt: skip
    lse = stats.data_ptr()
    kernel("forward", cdt)(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), gate.data_ptr(), out.data_ptr(), lse,
                           lse + b * h * sq * stats.element_size(), None, None)  # fmt: skip
    return out if cdt == dtype else out.to(dtype)
