"""Public entry point of the TRA op: input validation, the call's contract (``contract.py``) and choice of
implementation."""

from __future__ import annotations

import importlib.util
import math
import os
from typing import NamedTuple

import torch

from ...utils.checks import is_number
from ..autocast import no_autocast
from ..rms import rms_normalize
from .chunked import tra_chunked
from .contract import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids, fail, typed_repr
from .cpu_build import library as cpu_library
from .cpu_choice import use_kernels
from .decode import checks_itself, decodes, tra_decode, tra_decode_unsanitized
from .fused_cpu import tra_cpu, tra_cpu_decode
from .naive import tra_naive
from .nonfinite import poison, sanitize
from .split_kv import split_kv_attention
from .surrogate import tra_surrogate

IMPLS = ("auto", "naive", "chunked", "cpu", "triton")
SPLIT_KV_MIN_KEYS = 1024  # keys per split when a single query is decoded with the Triton kernels
SPLIT_KV_MAX_SPLITS = 64
_FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


class Call(NamedTuple):
    """A call's checked arguments: the score scale (resolved), its keep rule, documents and training aids (the seed
    not drawn yet: ``TrainingAids.drawn``), the early exit's prune_tau (chunked and Triton only), and the RMS norm's
    epsilon of q and k (None: used as given)."""

    scale: float
    keep: KeepRule
    documents: Documents
    aids: TrainingAids
    prune_tau: float | None
    qk_norm_eps: float | None = None


def validate_inputs(
    q,
    k,
    v,
    log_gate,
    *,
    scale=None,
    threshold=0.0,
    impl="auto",
    prune_tau=None,
    check_values: bool = True,
    logit_dropout=0.0,
    dropout_seed=None,
    local_window=0,
    sliding_window=0,
    keep_surrogate=0.0,
    cu_seqlens=None,
    key_padding_mask=None,
    segment_ids=None,
    qk_norm_eps=None,
    keep=None,
    documents=None,
    aids=None,
) -> Call:
    """Check a call once and build its contract (``contract.py``), or take the contract's objects as given
    (``keep``, ``documents``, ``aids``; the flat keywords they stand for must then keep their defaults): a
    ValueError names the argument, its value and what was expected.

    Shapes, dtypes and options are checked on the host from metadata alone. ``check_values`` adds the
    checks that need the data (log_gate <= 0, the documents' offsets, ids and mask values), which
    synchronise with the device. Non-finite values are not errors: NaN and -inf are not > 0, and the op
    maps them to NaN rows (see the op's docstring).
    """
    for name, t, rank in (("q", q, 4), ("k", k, 4), ("v", v, 4), ("log_gate", log_gate, 3)):
        if not isinstance(t, torch.Tensor):
            fail(name, type(t).__name__, "a torch.Tensor")
        if t.dim() != rank:
            fail(f"{name}.shape", tuple(t.shape), f"a {rank}-d tensor")
        if t.dtype not in _FLOAT_DTYPES:
            fail(f"{name}.dtype", t.dtype, "one of float64, float32, bfloat16, float16")
    b, h, sq, d = q.shape
    if d == 0:
        fail("q.shape[-1]", 0, "a head dim D >= 1")
    if k.shape[:2] != (b, h) or k.shape[3] != d:
        fail("k.shape", tuple(k.shape), f"(B, H, Sk, D) = ({b}, {h}, Sk, {d}) to match q {tuple(q.shape)}")
    if v.shape != k.shape:
        fail("v.shape", tuple(v.shape), f"the shape of k {tuple(k.shape)}")
    if log_gate.shape != (b, h, sq):
        fail("log_gate.shape", tuple(log_gate.shape), f"(B, H, Sq) = {(b, h, sq)}")
    if sq > k.shape[2]:
        fail("Sq", sq, f"Sq <= Sk = {k.shape[2]} (queries are the last Sq key positions)")
    if len({t.device for t in (q, k, v, log_gate)}) != 1:
        fail("devices", [str(t.device) for t in (q, k, v, log_gate)], "all inputs on one device")
    if len({t.dtype for t in (q, k, v)}) != 1:
        fail("q/k/v dtypes", (q.dtype, k.dtype, v.dtype), "one dtype for q, k and v")
    if scale is not None and not (is_number(scale) and math.isfinite(scale) and scale > 0):
        fail("scale", typed_repr(scale), "None or a finite positive number")
    flat = {"threshold": threshold, "local_window": local_window, "sliding_window": sliding_window,
            "keep_surrogate": keep_surrogate, "logit_dropout": logit_dropout, "dropout_seed": dropout_seed,
            "cu_seqlens": cu_seqlens, "key_padding_mask": key_padding_mask, "segment_ids": segment_ids}  # fmt: skip
    refuse_a_mix(flat, keep=keep, documents=documents, aids=aids)
    keep = keep or KeepRule(threshold=threshold, local_window=local_window, sliding_window=sliding_window)
    if impl not in IMPLS:
        fail("impl", repr(impl), f"one of {IMPLS}")
    if prune_tau is not None and not (is_number(prune_tau) and math.isfinite(prune_tau) and prune_tau > 0):
        fail(
            "prune_tau",
            typed_repr(prune_tau),
            "None or a finite positive number (prune attention mass below exp(-tau))",
        )
    aids = aids or TrainingAids(keep_surrogate=keep_surrogate, logit_dropout=logit_dropout, dropout_seed=dropout_seed)
    _check_served(impl, prune_tau, aids)
    if qk_norm_eps is not None and not (is_number(qk_norm_eps) and math.isfinite(qk_norm_eps) and qk_norm_eps > 0):
        fail("qk_norm_eps", typed_repr(qk_norm_eps), "None or a finite positive number (the RMS norm's epsilon)")
    if impl == "cpu" and q.device.type != "cpu":
        fail("impl", "'cpu'", f"CPU tensors for the fused CPU kernels (q is on {q.device})")
    if impl == "triton":
        if not (q.is_cuda or triton_interpreted()):
            fail("impl", "'triton'", "CUDA tensors (or TRITON_INTERPRET=1 for the Triton interpreter)")
        if q.shape[-1] > 128:
            fail("q.shape[-1]", q.shape[-1], "a head dim D <= 128 for impl='triton'")
        if q.dtype == torch.float64:
            fail("q.dtype", q.dtype, "float32, bfloat16 or float16 for impl='triton' (fp64 runs on 'chunked')")
    if check_values and log_gate.numel() and bool((log_gate > 0).any()):
        worst = log_gate[log_gate > 0].max().item()  # NaN-free: NaN is not > 0
        fail("log_gate", f"max {worst:.4g}", "values <= 0 (a log forget gate, e.g. logsigmoid)")
    if documents is not None:  # its ids checked against these inputs, as segment_ids would be
        segment_ids = documents.ids
    documents = Documents.of(
        b,
        k.shape[2],
        q.device,
        cu_seqlens=cu_seqlens,
        key_padding_mask=key_padding_mask,
        segment_ids=segment_ids,
        check_values=check_values,
    )
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    qk_norm_eps = None if qk_norm_eps is None else float(qk_norm_eps)
    return Call(scale, keep, documents, aids, None if prune_tau is None else float(prune_tau), qk_norm_eps)


# The contract's objects and the flat keywords each stands for, with their defaults.
CONTRACT_KEYWORDS = {
    "keep": (KeepRule, {"threshold": 0.0, "local_window": 0, "sliding_window": 0}),
    "documents": (Documents, {"cu_seqlens": None, "key_padding_mask": None, "segment_ids": None}),
    "aids": (TrainingAids, {"keep_surrogate": 0.0, "logit_dropout": 0.0, "dropout_seed": None}),
}


def refuse_a_mix(flat: dict, **objects) -> None:
    """A ValueError for a contract object of the wrong type, or given beside a flat keyword it stands for that is
    not at its default (``keep=`` with ``threshold=0.5``): one of the two forms per part of the contract."""
    for name, given in objects.items():
        if given is None:
            continue
        cls, keywords = CONTRACT_KEYWORDS[name]
        if not isinstance(given, cls):
            fail(name, typed_repr(given), f"None or a {cls.__name__}")
        for keyword, default in keywords.items():
            value = flat[keyword]
            if not (value is None if default is None else (not isinstance(value, torch.Tensor) and value == default)):
                fail(keyword, typed_repr(value), f"its default ({default}) beside {name}= (pass the {cls.__name__} "
                     f"alone, or {', '.join(keywords)} alone)")  # fmt: skip


def _check_served(impl: str, prune_tau, aids: TrainingAids) -> None:
    """The early exit's bound holds for the exact logits only: the fast paths refuse it with dropout or the
    surrogate (whose gradient reaches keys the exit skips). "naive" ignores prune_tau, and "auto" picks it."""
    if prune_tau is None or impl not in ("chunked", "cpu", "triton"):
        return
    if impl == "cpu":
        fail("prune_tau", typed_repr(prune_tau), "None for impl='cpu' (the fused CPU kernels have no early exit; "
             "impl='chunked' prunes)")  # fmt: skip
    for name, value in (("logit_dropout", aids.logit_dropout), ("keep_surrogate", aids.keep_surrogate)):
        if value:
            fail(
                "prune_tau",
                typed_repr(prune_tau),
                f"None with {name} = {value!r} for impl={impl!r} (the early exit's bound holds for the exact "
                "logits only; impl='naive' or 'auto' runs the materialised reference, which does not prune)",
            )


def threshold_relative_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    *,
    scale: float | None = None,
    threshold: float = 0.0,
    impl: str = "auto",
    prune_tau: float | None = None,
    logit_dropout: float = 0.0,
    dropout_seed: int | torch.Tensor | None = None,
    local_window: int = 0,
    sliding_window: int = 0,
    keep_surrogate: float = 0.0,
    cu_seqlens: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    segment_ids: torch.Tensor | None = None,
    qk_norm_eps: float | None = None,
    validate: bool = True,
    keep: KeepRule | None = None,
    documents: Documents | None = None,
    aids: TrainingAids | None = None,
) -> torch.Tensor:
    """Threshold Relative Attention (Opper et al., TMLR 2025, arXiv 2503.23174).

    Args:
        q: (B, H, Sq, D) queries; they sit at the last Sq of the Sk key positions.
        k, v: (B, H, Sk, D) keys and values, Sq <= Sk.
        log_gate: (B, H, Sq) per-query log forget gate, values <= 0 (NaN and -inf: see below).
        scale: score scale; 1/sqrt(D) by default.
        threshold: key j is kept for query i iff j <= i and scale * q_i . k_j > threshold (see the windows).
        impl: "naive" (materialised reference), "chunked" (O(S) memory PyTorch), "cpu" (fused C++ CPU
            kernels, ``fused_cpu.py``; built on first use, and where they cannot be, the chunked path after a
            one-line notice), "triton" (fused GPU kernels), or "auto" (triton for CUDA tensors when triton is
            installed; on the CPU the fused kernels where they are faster than the chunked path on this machine,
            measured once per build and thread count (``cpu_choice.py``, ``tra kernels``), else chunked and the
            materialised rows of ``decode.py`` for a decoding call: at most 16 queries without gradients; chunked
            whenever ``prune_tau`` is given).
        prune_tau: optional early exit (chunked and triton): keys are skipped once a bound proves that
            all remaining ones carry less than exp(-prune_tau) of a query's attention, so the output
            moves by at most 2 * exp(-prune_tau) * max|v|; forward and backward skip the same keys.
            Exact TRA when None (and always for "naive").
        logit_dropout: probability p in [0, 1) of dropping each pre-softmax logit, for training (the TRA
            authors' placement, ops/logit_dropout.py: kept logits are scaled by 1 / (1 - p), dropped ones
            become 0 and stay in the softmax). The keep decision is the same as without dropout. Every
            implementation drops the same logits: the mask is a hash of (dropout_seed, b, h, i, j)
            (ops/tra/dropout.py, docs/op_contract.md section 5). The contract below is the p = 0 case.
        dropout_seed: the mask's seed, an integer or a 0-dim integer tensor (read on its device: no host
            synchronisation); None draws one from torch's generator on q's device.
        local_window: w >= 0; the w most recent keys (distance d = i - j < w, the query's own key at d = 0)
            are kept whatever their score, and counted in c_ij like every kept key. 0: off.
        sliding_window: w >= 0; keys at distance d >= w are never kept (a window that does not grow with
            the length, e.g. for heads with threshold -inf). 0: every causal key can be kept.
            Together: kept(i, j) = 0 <= d and (sliding_window == 0 or d < sliding_window) and
            (s_ij > threshold or d < local_window); docs/op_contract.md, section 8.
        keep_surrogate: temperature tau >= 0 of a training-time surrogate gradient for the keep decision
            (ops/tra/surrogate.py): the forward values are exact TRA, bit for bit, but the backward treats
            the keep bit as a weight m_ij in the softmax and in the counts, with dm_ij/ds_ij =
            sigmoid'((s_ij - threshold) / tau) / tau, so keys near the threshold (dropped ones too) get
            gradient, computed by every impl in its own memory (docs/backward.md, section 7), after the logit
            dropout if any. 0 (the default) is the exact op, whose keep mask carries no gradient.
            With ``prune_tau``, "chunked" and "triton" refuse ``logit_dropout`` and ``keep_surrogate`` (the
            early exit's bound holds for the exact logits); "auto" then runs "naive", which never prunes.
        cu_seqlens: packed documents, flash-attn's convention: (N+1,) int32 offsets 0 = c_0 < ... < c_N = Sk
            of N documents concatenated along the sequence, B = 1.
        key_padding_mask: (B, Sk) bool or integer, 1 for a real token and 0 for padding (Hugging Face's
            attention_mask, the KV cache's positions included); combines with either of the others.
        segment_ids: (B, Sk) integer document id per position, negative for padding, documents contiguous
            (``ops/varlen.py: segment_ids_from`` makes them from the other two forms).
            With any of the three, key j is kept for query i (position Sk - Sq + r) only if both are real
            and in the same document, on top of the rule above (windows still measured in positions); a
            padding query keeps nothing and outputs 0. Each document gets exactly the op run on it alone;
            docs/op_contract.md, section 9, and docs/varlen.md.
        qk_norm_eps: eps > 0 RMS-normalises q and k per head first, x * rsqrt(mean(x^2) + eps) without an affine
            weight (as the TRA layer does; F.rms_norm's values): the fused CPU kernels do it in their own passes,
            every other implementation calls rms_norm. None (the default): q and k are used as given.
        validate: also check the values of ``log_gate`` (<= 0) and of the document arguments. Those checks
            read the data, a host synchronisation on a GPU and a graph break under torch.compile, so
            callers whose inputs are valid by construction (a logsigmoid gate, as in the TRA layer) pass
            False; inside torch.compile they are skipped. Shapes, dtypes and options are checked, except that a
            decoding step on the fused CPU kernels skips every check when the call passes the contract's objects
            with validate=False (a step is microseconds of work per layer: the TRA layer's decoding).
        keep, documents, aids: the call's contract as objects (``contract.py``: ``KeepRule``, ``Documents``,
            ``TrainingAids``), each in place of the flat keywords it stands for (threshold and the windows;
            cu_seqlens, key_padding_mask and segment_ids; keep_surrogate, logit_dropout and dropout_seed), which
            must then keep their defaults. A layer builds them once and passes them on.

    Returns:
        (B, H, Sq, D): out_i = sum over kept j of softmax_j(s_ij + log_gate_i * c_ij) v_j, where c_ij
        counts the kept keys in [j, i]; a query with no kept key outputs exactly 0.

    Non-finite inputs (NaN, +-inf), the same for every ``impl``: output row r, at position
    i = Sk - Sq + r, is NaN in all D entries iff q_r or log_gate_r (-inf included) has a non-finite
    entry, or some key j <= i has one in k_j or v_j (with documents: a key of its own document, and a
    padding query is never NaN). Every other row is bit-identical to the same
    impl run with the non-finite entries replaced by 0. NaN rows pass no gradient back, non-finite
    entries get zero gradient, and every other gradient is that of the sanitised call. NaN and -inf
    gates are not validation errors (they are not > 0; +inf is, and fails ``validate=True``). The
    masks are tensor ops: no host synchronisation. See docs/op_contract.md, section 7.
    """
    # Checked by construction (the contract's objects, no flat keyword beside them): a decoding step's shortcut goes
    # first; anything else is checked below.
    if (
        not validate
        and type(keep) is KeepRule
        and (documents is None or type(documents) is Documents)
        and (aids is None or type(aids) is TrainingAids)
        and not (threshold or local_window or sliding_window or logit_dropout or keep_surrogate)
        and dropout_seed is None
        and cu_seqlens is None
        and key_padding_mask is None
        and segment_ids is None
    ):
        unchecked = Call(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, keep, documents or NO_DOCUMENTS,
                         aids or NO_AIDS, prune_tau, qk_norm_eps)  # fmt: skip
        if (out := cpu_decode_step(q, k, v, log_gate, unchecked, impl)) is not None:
            return out
    check_values = validate and not torch.compiler.is_compiling() and not getattr(q, "is_meta", False)  # no values
    call = validate_inputs(
        q,
        k,
        v,
        log_gate,
        scale=scale,
        threshold=threshold,
        impl=impl,
        prune_tau=prune_tau,
        check_values=check_values,
        logit_dropout=logit_dropout,
        dropout_seed=dropout_seed,
        local_window=local_window,
        sliding_window=sliding_window,
        keep_surrogate=keep_surrogate,
        cu_seqlens=cu_seqlens,
        key_padding_mask=key_padding_mask,
        segment_ids=segment_ids,
        qk_norm_eps=qk_norm_eps,
        keep=keep,
        documents=documents,
        aids=aids,
    )
    if (out := decode_step(q, k, v, log_gate, call, impl)) is not None:
        return out
    if call.aids.logit_dropout or call.aids.dropout_seed is not None:
        call = call._replace(aids=call.aids.drawn(q.device))  # the seed, drawn once, whichever impl runs
    impl = _resolve(impl, q, k, v, log_gate, call)
    if call.qk_norm_eps is not None and not (impl == "cpu" and cpu_kernels_available()):  # the kernels normalise
        q, k = rms_normalize(q, call.qk_norm_eps), rms_normalize(k, call.qk_norm_eps)
        call = call._replace(qk_norm_eps=None)
    # The op fixes its own precision (fp32 accumulation); an enclosing autocast must not recast it (nor
    # round the scores that the keep decision compares with the threshold). The fused CPU kernels cast nothing.
    with no_autocast(q.device):
        q, k, v, log_gate, poisoned = sanitize(q, k, v, log_gate, call.documents.ids)
        return poison(_dispatch(q, k, v, log_gate, impl, call), poisoned)


def decode_step(q, k, v, log_gate, call: Call, impl: str) -> torch.Tensor | None:
    """The op's value for a decoding step (a few queries, no gradient, no training aid, no early exit) that a
    shortcut serves, or None for any other call: on the fused CPU kernels, one query per row in the kernel's own
    rows (``cpu_decode_step``); where "auto" runs neither those kernels nor Triton, the materialised rows of
    ``decode.py``, which apply the non-finite contract themselves for one query per row without documents."""
    if call.prune_tau is not None or call.aids.active or not decodes(q, k, v, log_gate):
        return None
    if q.device.type == "cpu" and impl in ("auto", "cpu") and _kernels_run(impl):
        return cpu_decode_step(q, k, v, log_gate, call, impl)  # else the kernels' forward, after the checks
    if impl != "auto" or (q.is_cuda and triton_available() and _fits_triton(q)):
        return None
    if call.qk_norm_eps is not None:
        q, k = rms_normalize(q, call.qk_norm_eps), rms_normalize(k, call.qk_norm_eps)
    contract = {"scale": call.scale, "keep": call.keep}
    with no_autocast(q.device):
        if checks_itself(q, call.documents):  # no pass over the whole cache to sanitise it
            return tra_decode_unsanitized(q, k, v, log_gate, **contract)
        q, k, v, log_gate, poisoned = sanitize(q, k, v, log_gate, call.documents.ids)
        return poison(tra_decode(q, k, v, log_gate, **contract, documents=call.documents), poisoned)


def _resolve(impl: str, q, k, v, log_gate, call: Call) -> str:
    """The implementation "auto" stands for (after ``decode_step``): triton for CUDA tensors it fits; on a CPU the
    fused kernels where they are faster than the chunked path on this machine (``cpu_choice.py``), else chunked;
    and the materialised reference when the early exit meets dropout or the surrogate (which the fast paths
    refuse)."""
    if impl != "auto":
        return impl
    if call.prune_tau is not None and call.aids.active:
        return "naive"
    if q.is_cuda and triton_available() and _fits_triton(q):
        return "triton"
    if q.device.type == "cpu" and call.prune_tau is None and cpu_kernels_chosen():
        return "cpu"
    return "chunked"


def _fits_triton(q) -> bool:
    """The Triton kernels compute in fp32 and do not compile for fp64 (fp64 stays on the chunked path)."""
    return q.shape[-1] <= 128 and q.dtype != torch.float64


def _kernels_run(impl: str) -> bool:
    """Whether the fused CPU kernels run ``impl`` ("auto" or "cpu") here."""
    return cpu_kernels_chosen() if impl == "auto" else cpu_kernels_available()


def cpu_decode_step(q, k, v, log_gate, call: Call, impl: str) -> torch.Tensor | None:
    """A decoding step in the fused CPU kernels' own rows, which apply the non-finite contract themselves: one
    query per row that sees every key (no documents, no sliding window, no RMS norm), no training aid, no early
    exit, no gradient, where the kernels run ``impl``; else None. Its conditions read metadata alone, so a caller
    whose inputs are valid by construction calls it before the op's checks (``threshold_relative_attention`` with
    the contract's objects and validate=False)."""
    plain = call.prune_tau is None and not call.aids.active and call.documents.ids is None and not call.qk_norm_eps
    one_query = q.shape[2] == 1 and not call.keep.sliding_window and q.device.type == "cpu"
    if not (plain and one_query and impl in ("auto", "cpu") and decodes(q, k, v, log_gate) and _kernels_run(impl)):
        return None
    return tra_cpu_decode(q, k, v, log_gate, scale=call.scale, keep=call.keep)


def _dispatch(q, k, v, log_gate, impl: str, call: Call):
    """Run ``impl`` with the call's contract, by keyword."""
    contract = {"scale": call.scale, "keep": call.keep, "documents": call.documents}
    if impl == "naive":  # the reference never prunes; the surrogate's gradient is its own materialised form
        run = tra_surrogate if call.aids.keep_surrogate else tra_naive
        return run(q, k, v, log_gate, **contract, aids=call.aids)
    if impl == "cpu" and cpu_kernels_available():
        return tra_cpu(q, k, v, log_gate, **contract, aids=call.aids, norm_eps=call.qk_norm_eps or 0.0)
    if impl == "triton":
        from .triton_op import forward_stats, tra_triton

        # Split-KV serves no training aid: not with dropout, and without gradients the surrogate changes nothing.
        if not call.aids.logit_dropout and _split_kv_decode(q, k, v, log_gate, call.prune_tau):
            n_splits = min(SPLIT_KV_MAX_SPLITS, k.shape[2] // SPLIT_KV_MIN_KEYS)
            return split_kv_attention(q, k, v, log_gate, **contract, n_splits=n_splits, forward_stats=forward_stats)
        return tra_triton(q, k, v, log_gate, **contract, aids=call.aids, prune_tau=call.prune_tau)
    return tra_chunked(q, k, v, log_gate, **contract, aids=call.aids, prune_tau=call.prune_tau)


def _split_kv_decode(q, k, v, log_gate, prune_tau) -> bool:
    """Decoding one token against a long cache, without gradients: split the keys across programs."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, log_gate))
    return q.shape[2] == 1 and k.shape[2] >= 2 * SPLIT_KV_MIN_KEYS and prune_tau is None and not needs_grad


# Looked up once: torch.compile cannot trace find_spec, and a graph break inside the op's autocast guard
# stops dynamo altogether (seen on an H200 with torch 2.11: an internal assertion, not a fallback).
_TRITON_INSTALLED = importlib.util.find_spec("triton") is not None


@torch.compiler.assume_constant_result
def cpu_kernels_available() -> bool:
    """Whether the fused CPU kernels are built (building them on the first call; a constant to torch.compile)."""
    return cpu_library() is not None


@torch.compiler.assume_constant_result
def cpu_kernels_chosen() -> bool:
    """Whether ``auto`` runs TRA on the fused CPU kernels: built, and faster than the chunked path on this machine
    (cpu_choice.py: measured once per build, CPU and thread count; TRA_CPU_KERNELS=1 skips the measurement)."""
    return use_kernels()


def triton_available() -> bool:
    return _TRITON_INSTALLED


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1" and triton_available()
