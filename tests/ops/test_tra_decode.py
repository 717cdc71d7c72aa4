"""The decoding path (ops/tra/decode.py): a few queries against a long cache, without gradients, exact against
the materialised reference under every keep rule, document layout and dtype, and chosen by "auto" only then."""

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
from tra_attn.ops.varlen import PADDING, segment_ids_from

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
    """The calls that reach the decoding path through the public op."""
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return tra_decode(*args, **kwargs)

    monkeypatch.setattr(dispatch_module, "tra_decode", spy)
    return calls


def test_auto_decodes_a_few_queries_without_gradients(monkeypatch):
    calls = spy_on_decode(monkeypatch)
    q, k, v, g = tra_inputs(1, 2, 1, 200, 16, requires_grad=False)
    expected = threshold_relative_attention(q, k, v, g, impl="naive", local_window=2)
    out = threshold_relative_attention(q, k, v, g, local_window=2)
    assert len(calls) == 1
    assert_close(out, expected, atol=1e-13)
    # NaN rows keep the op's contract: a non-finite key poisons the rows that can see it.
    k_bad = k.clone()
    k_bad[0, 1, 5, 0] = math.nan
    out = threshold_relative_attention(q, k_bad, v, g)
    assert torch.isnan(out[0, 1]).all() and torch.isfinite(out[0, 0]).all()


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
