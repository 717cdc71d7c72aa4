"""The keep rule's windows (docs/op_contract.md, section 8): every implementation against the naive reference,
forward and backward, and the invariances they promise.

    kept(i, j) = 0 <= d and (sliding_window == 0 or d < sliding_window) and (s_ij > threshold or d < local_window)
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import (
    TRA_IMPLS,
    assert_close,
    naive_with_key_start,
    output_and_grads,
    tra_inputs,
    triton_only,
)
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import KeepRule, tra_chunked, tra_naive
from tra_attn.ops.tra.chunked import chunked_forward_stats
from tra_attn.ops.tra.key_gate import tra_key_gate_naive
from tra_attn.ops.tra.naive import keep_and_count
from tra_attn.ops.tra.split_kv import split_kv_attention

NAMES = ("out", "dq", "dk", "dv", "dgate")
BLOCK = 8
# (local_window, sliding_window): each alone, both, 1 (only the query's own key), around the block width,
# and larger than every length below.
WINDOWS = [
    (1, 0),
    (3, 0),
    (BLOCK - 1, 0),
    (BLOCK + 1, 0),
    (0, 1),
    (0, 5),
    (0, BLOCK),
    (0, 2 * BLOCK + 1),
    (1, 1),
    (2, BLOCK - 1),
    (BLOCK + 1, 3),
    (100, 0),
    (0, 100),
    (4, 100),
]
# (B, H, Sq, Sk, D): odd lengths, Sq < Sk (decoding, and key blocks left of every window), one query.
SHAPES = [(2, 2, 37, 37, 16), (1, 2, 13, 61, 8), (1, 2, 1, 40, 8)]


def windows_id(w):
    return f"local{w[0]}-sliding{w[1]}"


def reference(inputs, grad_out, threshold, windows, scale):
    ref = [t.detach().double().cpu().requires_grad_() for t in inputs]
    keep = KeepRule(threshold, *windows)
    return output_and_grads(lambda *x: tra_naive(*x, scale=scale, keep=keep), ref, grad_out.double().cpu())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Sq{}-Sk{}-D{}".format(*s))
@pytest.mark.parametrize("windows", WINDOWS, ids=windows_id)
@pytest.mark.parametrize("threshold", [0.0, -math.inf])
def test_chunked_matches_naive_fp64(shape, windows, threshold):
    b, h, sq, sk, d = shape
    inputs = tra_inputs(b, h, sq, sk, d, seed=sq + sum(windows))
    grad_out = torch.randn(b, h, sq, d, dtype=torch.float64)
    expected = reference(inputs, grad_out, threshold, windows, d**-0.5)
    contract = {"scale": d**-0.5, "keep": KeepRule(threshold, *windows), "block_size": BLOCK}
    actual = output_and_grads(lambda *x: tra_chunked(*x, **contract), inputs, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-12, rtol=1e-12, name=name)


# Sq < Sk: the first query (position 91) sees keys from 91 - w + 1 on; w = 61 puts that key at the end of block 0.
TRITON_CASES = [(1, 0), (3, 0), (0, 1), (0, 31), (0, 33), (2, 33), (0, 61), (100, 100)]


@triton_only
@pytest.mark.parametrize("windows", TRITON_CASES, ids=windows_id)
@pytest.mark.parametrize("shape", [(1, 2, 45, 45, 16), (1, 1, 9, 100, 16)], ids=["prefill", "Sq<Sk"])
def test_triton_matches_naive(shape, windows):
    """fp32 through the interpreter (BN = 32: windows 31 and 33 end next to a key-block edge)."""
    b, h, sq, sk, d = shape
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs = [
        t.detach().float().to(device).requires_grad_() for t in tra_inputs(b, h, sq, sk, d, gate_shift=4.0, seed=5)
    ]
    grad_out = torch.randn(b, h, sq, d, device=device)
    threshold = -math.inf if windows[1] in (31, 61) else 0.0
    lw, sw = windows
    actual = output_and_grads(
        lambda *x: threshold_relative_attention(
            *x, threshold=threshold, impl="triton", local_window=lw, sliding_window=sw
        ),
        inputs,
        grad_out,
    )
    expected = reference(inputs, grad_out, threshold, windows, d**-0.5)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=3e-5 * max(1.0, e.abs().max().item()), name=name)


@pytest.mark.parametrize("impl", TRA_IMPLS)
@pytest.mark.parametrize(
    "threshold,windows",
    [(0.0, {"sliding_window": 41}), (-math.inf, {"local_window": 5, "sliding_window": 99})],
    ids=["sliding41", "local5-sliding99-no-threshold"],
)
def test_windows_that_do_not_bind_are_bit_identical_to_none(impl, threshold, windows):
    """A sliding window as long as the sequence, or a local window with threshold -inf (every key kept
    anyway), takes the window code paths and must change no bit of the output or the gradients."""
    dtype = torch.float64 if impl != "triton" else torch.float32
    device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
    inputs = [t.detach().to(device).requires_grad_() for t in tra_inputs(1, 2, 41, 41, 16, dtype=dtype, seed=2)]
    grad_out = torch.randn(1, 2, 41, 16, dtype=dtype, device=device)
    plain = output_and_grads(
        lambda *x: threshold_relative_attention(*x, threshold=threshold, impl=impl), inputs, grad_out
    )
    windowed = output_and_grads(
        lambda *x: threshold_relative_attention(*x, threshold=threshold, impl=impl, **windows), inputs, grad_out
    )
    for name, a, e in zip(NAMES, windowed, plain):
        assert torch.equal(a, e), name


def test_only_local_keys_kept_is_a_windowed_alibi():
    """No key passes the threshold: the local window alone is kept, c_ij = d + 1, and the row is a softmax of
    s_ij + g_i (d + 1) over its last w keys; with w = 1 the output is the query's own value (up to rounding:
    chunked may shift the softmax by a bound rather than by the logit, docs/carry.md section 3.3)."""
    q, k, v, g = tra_inputs(1, 2, 20, 20, 8, requires_grad=False)
    for impl in ("naive", "chunked"):
        own = threshold_relative_attention(q, k, v, g, threshold=1e9, impl=impl, local_window=1)
        assert torch.allclose(own, v, atol=1e-15, rtol=1e-15)
        out = threshold_relative_attention(q, k, v, g, threshold=1e9, impl=impl, local_window=3)
        scores = q @ k.transpose(-1, -2) / math.sqrt(8)
        d = torch.arange(20)[:, None] - torch.arange(20)[None, :]
        inside = (d >= 0) & (d < 3)
        weights = torch.softmax((scores + g[..., None] * (d + 1)).masked_fill(~inside, -math.inf), -1)
        assert_close(out, weights @ v, atol=1e-13, name=impl)


def test_with_a_local_window_no_row_is_empty_and_counts_are_bounded():
    q, k, v, g = tra_inputs(1, 2, 30, 30, 8, requires_grad=False)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    keep, count = keep_and_count(scores, 0.5, local_window=4)
    plain_keep = keep_and_count(scores, 0.5)[0]
    assert keep.any(-1).all() and (~plain_keep.any(-1)).any()  # rows that were empty keep their local keys
    assert (count[..., 0] <= 4 + plain_keep.sum(-1)).all()


@pytest.mark.parametrize("impl", TRA_IMPLS)
@pytest.mark.parametrize("local_window", [1, 3])
def test_irrelevant_keys_beyond_the_local_window_change_nothing(impl, local_window):
    """op_contract.md 6.3 with a local window: keys with s_ij <= threshold inserted at distance >= w add
    no distance, so query i's output is unchanged (keys nearer than w are kept whatever their score)."""
    gen = torch.Generator().manual_seed(local_window)
    dtype = torch.float32 if impl == "triton" else torch.float64
    d, seq, threshold = 8, 24, 0.1
    scale = d**-0.5
    q = torch.randn(1, 1, 1, d, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 1, seq, d, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 1, seq, d, generator=gen, dtype=torch.float64)
    g = torch.full((1, 1, 1), -0.3, dtype=torch.float64)
    unit = q[0, 0, 0] / q[0, 0, 0].norm()
    new_k = torch.randn(5, d, generator=gen, dtype=torch.float64)
    new_k = new_k - (new_k @ unit)[:, None] * unit - (0.5 / (scale * q.norm())) * unit  # scores -0.5
    new_v = torch.randn(5, d, generator=gen, dtype=torch.float64)
    slots = [0, 7, 7, 15, seq - local_window]  # before key `slot`: at distance >= w from the query
    ks, vs, last = [], [], 0
    for n, slot in enumerate(slots):
        ks += [k[0, 0, last:slot], new_k[n : n + 1]]
        vs += [v[0, 0, last:slot], new_v[n : n + 1]]
        last = slot
    k2, v2 = torch.cat(ks + [k[0, 0, last:]])[None, None], torch.cat(vs + [v[0, 0, last:]])[None, None]
    device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"

    def run(keys, values):
        args = (t.to(device, dtype) for t in (q, keys, values))
        return threshold_relative_attention(
            *args, g.to(device, dtype), scale=scale, threshold=threshold, impl=impl, local_window=local_window
        )

    assert_close(run(k2, v2).cpu(), run(k, v).cpu(), atol=1e-12 if dtype == torch.float64 else 1e-6)


@pytest.mark.parametrize("impl", TRA_IMPLS)
def test_a_sliding_window_sees_only_its_last_keys(impl):
    """The output at i depends only on the last sliding_window keys: cutting or changing the others does nothing."""
    dtype = torch.float32 if impl == "triton" else torch.float64
    device = "cuda" if impl == "triton" and torch.cuda.is_available() else "cpu"
    q, k, v, g = (t.to(device) for t in tra_inputs(1, 2, 1, 90, 16, dtype=dtype, requires_grad=False))
    for threshold, window in ((-math.inf, 7), (0.0, 33)):
        kw = dict(threshold=threshold, impl=impl, sliding_window=window)
        full = threshold_relative_attention(q, k, v, g, **kw)
        cut = threshold_relative_attention(q, k[:, :, -window:], v[:, :, -window:], g, **kw)
        k_other, v_other = k.clone(), v.clone()
        k_other[:, :, :-window] = torch.randn_like(k[:, :, :-window])
        v_other[:, :, :-window] = 5.0
        changed = threshold_relative_attention(q, k_other, v_other, g, **kw)
        assert torch.equal(full, changed) and torch.allclose(full, cut, atol=1e-12 if dtype == torch.float64 else 1e-6)


@pytest.mark.parametrize("windows", [(0, 0), (3, 0), (0, 50), (2, 130), (500, 0), (0, 700)], ids=windows_id)
def test_split_kv_is_exact_with_windows(windows):
    """The count-aware combine with the windows: the sliding window cuts the keys, the local keys form the
    last split (threshold -inf); fp64 through the chunked statistics against naive."""
    q, k, v, g = tra_inputs(2, 2, 1, 300, 16, requires_grad=False)
    contract = {"scale": 0.25, "keep": KeepRule(0.0, *windows)}
    expected = tra_naive(q, k, v, g, **contract)
    for n_splits in (1, 4, 7):
        actual = split_kv_attention(q, k, v, g, **contract, n_splits=n_splits, forward_stats=chunked_forward_stats)
        assert_close(actual, expected, atol=1e-13, name=f"{n_splits} splits")


@triton_only
def test_public_op_decodes_long_caches_with_windows():
    """The dispatcher's split-KV decode (Triton statistics per split) with both windows, against chunked."""
    from tra_attn.ops.tra import dispatch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sk = 2 * dispatch.SPLIT_KV_MIN_KEYS + 77
    q, k, v, g = (t.to(device) for t in tra_inputs(1, 2, 1, sk, 16, dtype=torch.float32, requires_grad=False))
    for windows in ({"local_window": 3}, {"local_window": 2, "sliding_window": 1500}):
        with torch.no_grad():
            assert dispatch._split_kv_decode(q, k, v, g, None)
            out = threshold_relative_attention(q, k, v, g, impl="triton", **windows)
        expected = threshold_relative_attention(*(t.cpu() for t in (q, k, v, g)), impl="chunked", **windows)
        assert_close(out.cpu(), expected, atol=2e-5, name=str(windows))


@pytest.mark.parametrize("windows", [(2, 0), (0, 40), (3, 20)], ids=windows_id)
def test_pruning_with_windows_is_tra_over_the_visited_keys(windows):
    """The early-exit bound holds for locally kept keys too (their scores are <= smax as well): the pruned
    forward and backward are TRA over the visited keys, and the output moves by at most 2 exp(-tau) max|v|."""
    q, k, v, g = tra_inputs(1, 2, 120, 130, 16, gate_shift=-4.0)
    scale, tau = 0.25, 3.0
    grad_out = torch.randn(1, 2, 120, 16, dtype=torch.float64)
    contract = {"scale": scale, "keep": KeepRule(0.0, *windows), "block_size": 16, "prune_tau": tau}
    key_start = chunked_forward_stats(q, k, v, g, **contract)[3]
    assert (key_start > max(0, 130 - 120 - windows[1] + 1)).any(), "strongly forgetting rows should stop early"
    actual = output_and_grads(lambda *x: tra_chunked(*x, **contract), [q, k, v, g], grad_out)
    expected = output_and_grads(
        lambda *x: naive_with_key_start(*x, scale, 0.0, key_start, *windows), [q, k, v, g], grad_out
    )
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-11, rtol=1e-11, name=name)
    exact = tra_naive(*(t.detach() for t in (q, k, v, g)), scale=scale, keep=KeepRule(0.0, *windows))
    assert (actual[0] - exact).abs().max() <= 2 * math.exp(-tau) * v.abs().max()


@triton_only
def test_triton_pruning_with_windows_stays_under_the_bound():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v, g = (t.detach().float().to(device) for t in tra_inputs(1, 2, 150, 150, 16, gate_shift=-4.0))
    tau = 3.0
    for windows in ({"local_window": 2}, {"local_window": 2, "sliding_window": 70}):
        pruned = threshold_relative_attention(q, k, v, g, impl="triton", prune_tau=tau, **windows)
        exact = threshold_relative_attention(*(t.cpu().double() for t in (q, k, v, g)), impl="naive", **windows)
        assert (pruned.cpu().double() - exact).abs().max() <= 2 * math.exp(-tau) * v.abs().max().item() + 1e-5


@pytest.mark.parametrize("windows", [(2, 0), (0, 6), (3, 9)], ids=windows_id)
def test_key_gate_ablation_with_a_constant_gate_is_tra_with_the_same_windows(windows):
    q, k, v, _ = tra_inputs(1, 2, 25, 25, 8, requires_grad=False)
    gate = torch.full((1, 2, 25), -0.4, dtype=torch.float64)
    contract = {"scale": 0.3, "keep": KeepRule(0.0, *windows)}
    keygate = tra_key_gate_naive(q, k, v, gate, **contract)
    assert_close(keygate, tra_naive(q, k, v, gate, **contract), atol=1e-13)
