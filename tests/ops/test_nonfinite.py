"""Non-finite inputs (docs/op_contract.md, "Non-finite inputs"), the same for every implementation.

Output row r (position i = Sk - Sq + r) is NaN iff q_r or log_gate_r has a non-finite entry or some
key j <= i has one in k_j or v_j; every other row, and every gradient, is that of the same impl run
on the inputs with the non-finite entries replaced by 0 (with no gradient from the NaN rows).
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import TRA_IMPLS, assert_close, tra_inputs, triton_only
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import KeepRule, dispatch
from tra_attn.ops.tra.naive import tra_naive

NAN, INF = float("nan"), float("inf")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAMES = ("q", "k", "v", "log_gate")


def corrupt(inputs, spec):
    """Copies of (q, k, v, log_gate) with spec = [(name, index, value), ...] written in."""
    out = [t.detach().clone() for t in inputs]
    for name, index, value in spec:
        out[NAMES.index(name)][index] = value
    return out


def expected_nan_rows(shape, spec):
    """(B, H, Sq) bool: the rows the contract makes NaN, from the spec alone."""
    b, h, sq, sk = shape[:4]
    rows = torch.zeros(b, h, sq, dtype=torch.bool)
    for name, index, _ in spec:
        bi, hi, pos = index[:3]
        if name in ("q", "log_gate"):
            rows[bi, hi, pos] = True
        else:  # key position pos is seen by the rows at positions >= pos
            rows[bi, hi, max(0, pos - (sk - sq)) :] = True
    return rows


def exclusive_keys(rows, sk):
    """(B, H, Sk) bool: keys seen only by NaN rows (key j is seen by rows r with Sk - Sq + r >= j)."""
    sq = rows.shape[-1]
    first_row = (torch.arange(sk) - (sk - sq)).clamp(min=0)
    # all rows from first_row[j] to the end are NaN <=> the last non-NaN row is before first_row[j]
    last_ok = torch.where(~rows, torch.arange(sq), -1).amax(-1, keepdim=True)
    return first_row > last_ok


def check(impl, shape, spec, seed=0, dtype=torch.float32, threshold=0.0, prune_tau=None, grads=True):
    b, h, sq, sk, d = shape
    clean = [t.to(DEVICE) for t in tra_inputs(b, h, sq, sk, d, dtype=dtype, seed=seed, requires_grad=False)]
    bad = [t.requires_grad_() for t in corrupt(clean, spec)]
    sanitised = [t.requires_grad_() for t in corrupt(clean, [(n, i, 0.0) for n, i, _ in spec])]
    # A gate of +inf is > 0: validate=True rejects it (test_positive_gates_are_still_rejected).
    validate = not any(name == "log_gate" and value == INF for name, _, value in spec)
    kw = {"impl": impl, "threshold": threshold, "prune_tau": prune_tau, "validate": validate}

    out = threshold_relative_attention(*bad, **kw)
    ref = threshold_relative_attention(*sanitised, **kw)
    rows = expected_nan_rows(shape, spec).to(out.device)
    assert torch.isfinite(ref).all()
    assert torch.equal(out.isnan().any(-1), rows), "NaN rows differ from the contract"
    assert out[rows].isnan().all(), "a NaN row must be NaN in every entry"
    assert torch.equal(out[~rows], ref[~rows]), "other rows must equal the sanitised call"
    if prune_tau is None:  # across implementations: the fp64 reference on the sanitised inputs
        exact = tra_naive(*[t.detach().cpu().double() for t in sanitised], scale=d**-0.5, keep=KeepRule(threshold))
        tol = {torch.float64: 1e-10, torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
        assert_close(out[~rows].cpu(), exact[~rows.cpu()], atol=tol, name=f"{impl} vs naive fp64")
    if not grads:
        return
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)).to(out)
    got = torch.autograd.grad(out, bad, grad_out)
    want = torch.autograd.grad(ref, sanitised, grad_out.masked_fill(rows[..., None], 0.0))
    keys = exclusive_keys(rows.cpu(), sk).to(out.device)
    for name, g, w in zip(NAMES, got, want):
        assert torch.isfinite(g).all(), f"d{name} not finite"
        if impl == "triton" and g.is_cuda:  # dK/dV are fp32 atomics: the order of the sums varies
            assert_close(g, w, atol=1e-5 * max(1.0, w.abs().max().item()), name=f"d{name}")
        else:
            assert torch.equal(g, w), f"d{name} differs from the sanitised call"
    dq, dk, dv, dg = got
    assert (dq[rows] == 0).all() and (dg[rows] == 0).all(), "a NaN row's q and gate get no gradient"
    assert (dk[keys] == 0).all() and (dv[keys] == 0).all(), "keys seen only by NaN rows get no gradient"
    return out


@pytest.mark.parametrize("impl", TRA_IMPLS)
@pytest.mark.parametrize(
    "spec",
    [
        [("q", (0, 1, 3, 5), NAN)],
        [("q", (1, 0, 0, 0), INF)],
        [("q", (0, 0, 6, 2), -INF)],
        [("k", (0, 1, 2, 3), NAN)],
        [("k", (1, 0, 2, 0), INF)],
        [("k", (0, 0, 2, 15), -INF)],
        [("v", (0, 1, 2, 7), NAN)],
        [("v", (1, 1, 5, 1), INF)],
        [("log_gate", (0, 1, 4), NAN)],
        [("log_gate", (1, 0, 0), -INF)],
        [("log_gate", (0, 0, 7), INF)],
    ],
    ids=lambda s: "-".join(f"{n}{list(i)}={v}" for n, i, v in s),
)
def test_one_bad_entry(impl, spec):
    check(impl, (2, 2, 8, 8, 16), spec)


SEVERAL = [  # several positions at once, in several (b, h); b=0, h=1 carries a bad key only
    ("q", (0, 0, 40, 3), NAN),
    ("k", (0, 1, 37, 0), INF),
    ("v", (1, 0, 50, 9), NAN),
    ("v", (1, 0, 60, 9), -INF),
    ("log_gate", (1, 1, 5), -INF),
    (
        "log_gate",
        (
            1,
            1,
            66,
        ),
        NAN,
    ),
    ("q", (1, 1, 20, 1), INF),
]


@pytest.mark.parametrize("impl", TRA_IMPLS)
def test_several_positions_and_heads_across_key_blocks(impl):
    out = check(impl, (2, 2, 70, 70, 16), SEVERAL, seed=3)
    rows = out.isnan().any(-1)
    assert rows[0, 1].tolist() == [False] * 37 + [True] * 33  # the bad key, from its position on
    assert rows[0, 0].sum() == 1 and rows[1, 0].sum() == 20 and rows[1, 1].sum() == 3


@pytest.mark.parametrize("impl", TRA_IMPLS)
@pytest.mark.parametrize(
    "spec",
    [
        [("k", (0, 0, 9, 4), NAN)],  # position 9: rows at positions >= 9, i.e. r >= 2
        [("v", (0, 1, 3, 4), INF)],  # a cached key before every query: all rows
        [("k", (0, 1, 11, 0), -INF), ("q", (0, 0, 1, 0), NAN), ("log_gate", (0, 0, 3), -INF)],
    ],
    ids=["key-in-window", "key-in-cache", "mixed"],
)
def test_queries_after_a_cache(impl, spec):
    check(impl, (1, 2, 5, 12, 16), spec, seed=1)


@pytest.mark.parametrize("impl", TRA_IMPLS)
def test_single_query_decode(impl):
    check(impl, (2, 2, 1, 40, 16), [("k", (0, 1, 17, 2), NAN), ("q", (1, 0, 0, 3), INF)], seed=2)


@pytest.mark.parametrize("impl", ["chunked", pytest.param("triton", marks=triton_only)])
def test_pruning_rows_equal_the_pruned_sanitised_call(impl):
    check(impl, (1, 2, 70, 70, 16), SEVERAL[:2] + [("log_gate", (0, 1, 10), NAN)], seed=4, prune_tau=4.0)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_other_dtypes(impl, dtype):
    check(impl, (1, 2, 9, 9, 8), [("v", (0, 0, 4, 1), INF), ("q", (0, 1, 2, 7), NAN)], dtype=dtype, threshold=-INF)


@triton_only
def test_split_kv_decode(monkeypatch):
    monkeypatch.setattr(dispatch, "SPLIT_KV_MIN_KEYS", 16)  # a short cache takes the split-KV path on CPU
    spec = [("k", (0, 1, 33, 2), NAN), ("v", (1, 0, 70, 0), -INF), ("q", (1, 1, 0, 5), NAN)]
    clean = [t.to(DEVICE) for t in tra_inputs(2, 2, 1, 80, 16, dtype=torch.float32, requires_grad=False)]
    assert dispatch._split_kv_decode(*clean, None)
    with torch.no_grad():
        out = threshold_relative_attention(*corrupt(clean, spec), impl="triton")
        ref = threshold_relative_attention(*corrupt(clean, [(n, i, 0.0) for n, i, _ in spec]), impl="triton")
    rows = out.isnan().any(-1)
    assert rows.flatten().tolist() == [False, True, True, True]
    assert out[rows].isnan().all()
    assert torch.equal(out[~rows], ref[~rows])
    exact = tra_naive(*[t[:1, :1].double().cpu() for t in clean], scale=0.25, keep=KeepRule(0.0))
    assert_close(out[0, 0].cpu(), exact[0, 0], atol=3e-5)


@pytest.mark.parametrize("value", [NAN, -INF])
def test_non_finite_gates_pass_validation(value):
    q, k, v, g = tra_inputs(1, 1, 4, 4, 8, requires_grad=False)
    g[0, 0, 1] = value
    out = threshold_relative_attention(q, k, v, g, validate=True)
    assert out[0, 0].isnan().any(-1).tolist() == [False, True, False, False]


@pytest.mark.parametrize("value,shown", [(0.5, r"0\.5"), (INF, "inf")])
def test_positive_gates_are_still_rejected(value, shown):
    q, k, v, g = tra_inputs(1, 1, 4, 4, 8, requires_grad=False)
    g[0, 0, 1], g[0, 0, 2] = NAN, value
    with pytest.raises(ValueError, match=rf"log_gate = max {shown}; expected values <= 0"):
        threshold_relative_attention(q, k, v, g)
