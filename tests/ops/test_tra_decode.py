"""The decoding path (ops/tra/decode.py): a few queries against a long cache, without gradients, exact against
the materialised reference under every keep rule, document layout and dtype, and chosen by "auto" only then (where
the fused CPU kernels, which "auto" prefers, are not built: tests/ops/test_tra_cpu.py tests their decoding rows)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import assert_close, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import KeepRule, tra_naive
from tra_attn.ops.tra import dispatch as dispatch_module
from tra_attn.ops.tra.contract import Documents
from tra_attn.ops.tra.decode import DECODE_MAX_QUERIES, tra_decode
from tra_attn.ops.tra.decode import tra_decode_unsanitized as unsanitized
from tra_attn.ops.varlen import PADDING, segment_ids_from


@pytest.fixture(autouse=True)
def without_fused_kernels(monkeypatch):
    """ "auto" as on a machine where the fused CPU kernels could not be built."""
    monkeypatch.setattr(dispatch_module, "cpu_kernels_available", lambda: False)
    monkeypatch.setattr(dispatch_module, "cpu_kernels_chosen", lambda: False)


RULES = {
    "threshold": KeepRule(0.0),
    "high-threshold": KeepRule(0.6),  # most rows keep few keys, some none
    "dense": KeepRule(-math.inf),
    "local3": KeepRule(0.0, local_window=3),
    "sliding40": KeepRule(0.0, sliding_window=40),
    "both": KeepRule(0.2, local_window=4, sliding_window=33),
    "dense-window": KeepRule(-math.inf, sliding_window=17),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 257), (3, 100), (DECODE_MAX_QUERIES, 131)])
def test_decode_matches_naive_fp64(rule, sq, sk):
    q, k, v, g = tra_inputs(2, 3, sq, sk, 16, requires_grad=False, seed=sk)
    contract = {"scale": 0.25, "keep": RULES[rule]}
    assert_close(tra_decode(q, k, v, g, **contract), tra_naive(q, k, v, g, **contract), atol=1e-13, name=rule)


def test_rows_without_a_kept_key_output_zero():
    q, k, v, g = tra_inputs(1, 2, 4, 60, 8, requires_grad=False)
    out = tra_decode(q, k, v, g, scale=1.0, keep=KeepRule(1e6))
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("windows", [(0, 0), (3, 0), (0, 50)], ids=["plain", "local3", "sliding50"])
def test_decode_with_documents_and_padding_is_exact(windows):
    """A left-padded cache of unequal rows (generation with an attention mask) and a packed one; a padding
    query outputs 0."""
    mask = torch.zeros(2, 120, dtype=torch.long)
    mask[0, 20:], mask[1, 87:] = 1, 1
    cu = torch.tensor([0, 50, 51, 99, 120], dtype=torch.int32)
    layouts = {
        "left-padding": segment_ids_from(2, 120, "cpu", key_padding_mask=mask),
        "packed": segment_ids_from(1, 120, "cpu", cu_seqlens=cu).expand(2, -1),
    }
    for name, seg in layouts.items():
        q, k, v, g = tra_inputs(2, 2, 2, 120, 16, requires_grad=False)
        contract = {"scale": 0.25, "keep": KeepRule(0.0, *windows), "documents": Documents(seg)}
        assert_close(tra_decode(q, k, v, g, **contract), tra_naive(q, k, v, g, **contract), atol=1e-13, name=name)
    seg = layouts["left-padding"].clone()
    seg[:, -1] = PADDING
    out = tra_decode(q, k, v, g, scale=0.25, keep=KeepRule(0.0), documents=Documents(seg))
    assert (out[:, :, -1] == 0).all()


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
def test_decode_in_low_precision_accumulates_in_fp32(dtype, atol):
    q, k, v, g = tra_inputs(1, 4, 1, 300, 32, dtype=dtype, requires_grad=False)
    contract = {"scale": 32**-0.5, "keep": KeepRule(0.0, local_window=2)}
    out = tra_decode(q, k, v, g, **contract)
    assert out.dtype == dtype
    assert_close(out, tra_naive(q, k, v, g, **contract), atol=atol)


def spy_on_decode(monkeypatch) -> list:
    """The names of the decoding functions (sanitised or not) that calls through the public op reach."""
    calls = []

    def spy(function):
        def called(*args, **kwargs):
            calls.append(function.__name__)
            return function(*args, **kwargs)

        return called

    monkeypatch.setattr(dispatch_module, "tra_decode", spy(tra_decode))
    monkeypatch.setattr(dispatch_module, "tra_decode_unsanitized", spy(unsanitized))
    return calls


def test_auto_decodes_a_few_queries_without_gradients(monkeypatch):
    calls = spy_on_decode(monkeypatch)
    q, k, v, g = tra_inputs(2, 2, 3, 200, 16, requires_grad=False)
    expected = threshold_relative_attention(q, k, v, g, impl="naive", local_window=2)
    assert_close(threshold_relative_attention(q, k, v, g, local_window=2), expected, atol=1e-13)
    mask = torch.ones(2, 200, dtype=torch.long)
    mask[1, :50] = 0  # a left-padded row: documents, so the sanitised path
    last = (q[:, :, -1:], k, v, g[..., -1:])
    expected = threshold_relative_attention(*last, impl="naive", key_padding_mask=mask)
    assert_close(threshold_relative_attention(*last, key_padding_mask=mask), expected, atol=1e-13)
    threshold_relative_attention(*last)  # one query, no documents: the step checks its own rows
    assert calls == ["tra_decode", "tra_decode", "tra_decode_unsanitized"]


@pytest.mark.parametrize(
    "case",
    ["gradients", "many-queries", "dropout", "surrogate", "pruning", "explicit-chunked"],
)
def test_auto_keeps_the_chunked_path_otherwise(monkeypatch, case):
    """Training (a gradient, an aid), long query blocks, the early exit and an explicit impl never decode."""
    calls = spy_on_decode(monkeypatch)
    sq = DECODE_MAX_QUERIES + 1 if case == "many-queries" else 1
    q, k, v, g = tra_inputs(1, 2, sq, 64, 16, requires_grad=case == "gradients")
    kwargs = {
        "dropout": {"logit_dropout": 0.1},
        "surrogate": {"keep_surrogate": 1.0},
        "pruning": {"prune_tau": 20.0},
        "explicit-chunked": {"impl": "chunked"},
    }.get(case, {})
    threshold_relative_attention(q, k, v, g, **kwargs)
    assert calls == []


@pytest.mark.parametrize(
    "where",
    ["q-nan", "q-inf", "kept-key-nan", "dropped-key-inf", "value-nan", "value-of-dropped-key-inf", "gate-ninf",
     "gate-nan", "clean"],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_one_query_without_documents_keeps_the_nonfinite_contract_unsanitised(monkeypatch, where, dtype):
    """A decoding step with one query and no documents skips the pass that sanitises the cache: its rows are NaN
    exactly where the contract says (the materialised reference's), and every other row equals the reference."""
    calls = spy_on_decode(monkeypatch)
    q, k, v, g = tra_inputs(2, 3, 1, 90, 8, dtype=dtype, requires_grad=False, seed=7)
    scores = (q.double() @ k.double().transpose(-1, -2))[0, 1, 0] / math.sqrt(8)
    kept, dropped = int(scores.argmax()), int(scores.argmin())  # a key kept and a key dropped by row (0, 1)
    bad = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf}
    name, _, value = where.rpartition("-")
    if where != "clean":
        target = {"q": (q, (0, 1, 0, 3)), "kept-key": (k, (0, 1, kept, 2)), "dropped-key": (k, (0, 1, dropped, 0)),
                  "value": (v, (0, 1, kept, 5)), "value-of-dropped-key": (v, (0, 1, dropped, 1)),
                  "gate": (g, (0, 1, 0))}[name]  # fmt: skip
        target[0][target[1]] = bad[value]
    out = threshold_relative_attention(q, k, v, g, local_window=2, validate=False)
    expected = threshold_relative_attention(q, k, v, g, impl="naive", local_window=2, validate=False)
    assert calls == ["tra_decode_unsanitized"]
    assert torch.equal(torch.isnan(out), torch.isnan(expected)), where
    assert torch.isnan(out[0, 1]).all() == (where != "clean")
    finite = ~torch.isnan(expected)
    assert_close(out[finite], expected[finite], atol=1e-13 if dtype == torch.float64 else 2e-3, name=where)
