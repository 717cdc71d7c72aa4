"""The call contract of the op's implementations (ops/tra/contract.py, docs/op_contract.md section 10): three frozen
objects, built and checked once by the dispatcher and passed by keyword; a bad value names the argument; an
implementation refuses the aids it does not serve."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tests.conftest import tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import NO_AIDS, NO_DOCUMENTS, Documents, KeepRule, TrainingAids, dispatch, tra_chunked, tra_naive
from tra_attn.ops.tra.chunked import chunked_forward_stats
from tra_attn.ops.tra.key_gate import tra_key_gate_naive
from tra_attn.ops.tra.split_kv import split_kv_attention
from tra_attn.ops.tra.surrogate import tra_surrogate
from tra_attn.ops.varlen import segment_ids_from

OP = "threshold_relative_attention: "


def test_the_keep_rule_converts_its_threshold_and_compares_by_value():
    rule = KeepRule(1, local_window=2)
    assert rule.threshold == 1.0 and isinstance(rule.threshold, float) and rule.windows == (2, 0)
    assert rule == KeepRule(1.0, 2, 0) and rule.thresholded and not KeepRule(-math.inf).thresholded
    assert rule.replace(sliding_window=5) == KeepRule(1.0, 2, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.threshold = 0.0
    assert KeepRule() == KeepRule(0.0, 0, 0)


@pytest.mark.parametrize(
    "fields,pattern",
    [
        ({"threshold": math.nan}, r"threshold = nan; expected a number below \+inf"),
        ({"threshold": math.inf}, r"threshold = inf; expected a number below \+inf"),
        ({"threshold": None}, r"threshold = None \(a NoneType\); expected a number"),
        ({"threshold": True}, r"threshold = True \(a bool\); expected a number"),
        ({"local_window": -1}, r"local_window = -1; expected a non-negative integer \(0: off; w > 0: the w most"),
        ({"local_window": 2.0}, r"local_window = 2\.0; expected a non-negative integer"),
        ({"sliding_window": True}, r"sliding_window = True \(a bool\); expected a non-negative integer"),
        ({"sliding_window": "8"}, r"sliding_window = '8' \(a str\); expected a non-negative integer"),
    ],
)
def test_a_bad_keep_rule_names_the_argument(fields, pattern):
    with pytest.raises(ValueError, match=rf"^{OP}{pattern}"):
        KeepRule(**fields)
    with pytest.raises(ValueError, match=rf"^{OP}{pattern}"):  # the op's own refusal is the rule's
        threshold_relative_attention(*tra_inputs(1, 1, 4, 4, 8, requires_grad=False), **fields)


@pytest.mark.parametrize(
    "fields,pattern",
    [
        ({"logit_dropout": 1.0}, r"logit_dropout = 1\.0; expected a probability in \[0, 1\)"),
        ({"logit_dropout": -0.1}, r"logit_dropout = -0\.1; expected a probability"),
        ({"logit_dropout": None}, r"logit_dropout = None \(a NoneType\); expected a probability"),
        ({"keep_surrogate": -1.0}, r"keep_surrogate = -1\.0; expected a finite temperature >= 0"),
        ({"keep_surrogate": math.inf}, r"keep_surrogate = inf; expected a finite temperature >= 0"),
        ({"dropout_seed": 1.5}, r"dropout_seed = 1\.5; expected None, an integer or a 0-dim integer tensor"),
        ({"dropout_seed": True}, r"dropout_seed = True \(a bool\); expected None, an integer"),
        ({"dropout_seed": torch.tensor([7])}, r"dropout_seed = tensor\(\[7\]\) \(a Tensor\); expected None"),
    ],
)
def test_bad_training_aids_name_the_argument(fields, pattern):
    with pytest.raises(ValueError, match=rf"^{OP}{pattern}"):
        TrainingAids(**fields)


def test_the_aids_are_off_by_default_and_draw_the_seed_only_with_dropout():
    assert TrainingAids() == NO_AIDS and not NO_AIDS.active and TrainingAids(keep_surrogate=1).keep_surrogate == 1.0
    assert TrainingAids(logit_dropout=0.1).active and TrainingAids(keep_surrogate=0.5).active
    torch.manual_seed(3)
    state = torch.get_rng_state()
    assert TrainingAids(keep_surrogate=0.5, dropout_seed=9).drawn("cpu").dropout_seed is None  # no dropout: no seed
    assert torch.equal(torch.get_rng_state(), state)  # and nothing drawn
    drawn = TrainingAids(logit_dropout=0.2).drawn("cpu").dropout_seed
    assert drawn.dim() == 0 and drawn.dtype == torch.int64
    torch.manual_seed(3)
    assert torch.equal(TrainingAids(logit_dropout=0.2).drawn("cpu").dropout_seed, drawn)  # the same generator state
    assert int(TrainingAids(logit_dropout=0.2, dropout_seed=5).drawn("cpu").dropout_seed) == 5
    assert TrainingAids(keep_surrogate=0.5).surrogate_for(KeepRule(-math.inf)) == 0.0  # nothing to relax
    assert TrainingAids(keep_surrogate=0.5).surrogate_for(KeepRule(0.0)) == 0.5


def test_documents_are_the_ops_three_forms_as_one_tensor():
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    ids = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    by_offsets = Documents.of(1, 7, "cpu", cu_seqlens=cu, key_padding_mask=mask)
    assert by_offsets.ids.tolist() == [[0, 0, 0, 1, 1, 1, -1]] and by_offsets.ids.dtype == torch.int32
    assert torch.equal(by_offsets.ids, segment_ids_from(1, 7, "cpu", cu_seqlens=cu, key_padding_mask=mask))
    converted = Documents(ids)  # another integer dtype becomes the int32 every implementation reads
    assert converted.ids.dtype == torch.int32 and converted.packed and not NO_DOCUMENTS.packed
    assert Documents.of(1, 7, "cpu") == NO_DOCUMENTS and NO_DOCUMENTS.segments(3) is None
    segments = converted.segments(2)
    assert segments.queries.tolist() == [[1, 1]] and segments.starts.tolist() == [[3, 3]]
    assert converted.mask(2).shape == (1, 1, 2, 7)
    for bad, shown in ((ids.float(), r"Tensor torch\.float32 \(1, 7\)"), (ids[0], r"Tensor torch\.int64 \(7,\)")):
        with pytest.raises(ValueError, match=rf"^{OP}documents\.ids = {shown}; expected None or a \(B, Sk\) integer"):
            Documents(bad)
    with pytest.raises(ValueError, match=rf"^{OP}cu_seqlens\[-1\] = 7; expected the sequence length 8"):
        Documents.of(1, 8, "cpu", cu_seqlens=cu)


def record(monkeypatch, name: str) -> list:
    """Calls of dispatch's ``name`` as (positional args, keyword args), still computed."""
    calls, original = [], getattr(dispatch, name)

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(dispatch, name, spy)
    return calls


def count_checks(monkeypatch) -> dict:
    """How often each contract object is built (its fields checked)."""
    counts = {}
    for cls in (KeepRule, Documents, TrainingAids):
        original = cls.__post_init__

        def counted(self, original=original, name=cls.__name__):
            counts[name] = counts.get(name, 0) + 1
            original(self)

        monkeypatch.setattr(cls, "__post_init__", counted)
    return counts


@pytest.mark.parametrize(
    "impl,name,options",
    [
        ("naive", "tra_naive", {"logit_dropout": 0.2}),
        ("naive", "tra_surrogate", {"keep_surrogate": 0.5, "logit_dropout": 0.2}),
        ("chunked", "tra_chunked", {"keep_surrogate": 0.5, "prune_tau": None}),
        ("chunked", "tra_chunked", {"prune_tau": 4.0}),
    ],
)
def test_the_dispatcher_checks_once_and_passes_the_contract_by_keyword(monkeypatch, impl, name, options):
    q, k, v, g = tra_inputs(1, 2, 6, 6, 8, requires_grad=False)
    seg = torch.tensor([[0, 0, 1, 1, 1, -1]])
    calls = record(monkeypatch, name)
    counts = count_checks(monkeypatch)
    threshold_relative_attention(
        q, k, v, g, impl=impl, threshold=0.1, local_window=2, segment_ids=seg, dropout_seed=4, **options
    )
    # Built once each (the aids twice: checked, then with the seed drawn; TrainingAids.drawn replaces the seed).
    assert counts == {"KeepRule": 1, "Documents": 1, "TrainingAids": 2}
    ((args, kwargs),) = calls
    assert len(args) == 4 and all(isinstance(t, torch.Tensor) for t in args)  # q, k, v, log_gate; nothing else
    assert kwargs["scale"] == 1 / math.sqrt(8) and kwargs["keep"] == KeepRule(0.1, local_window=2)
    assert torch.equal(kwargs["documents"].ids, seg.int())
    aids = kwargs["aids"]
    assert aids.keep_surrogate == options.get("keep_surrogate", 0.0)
    assert aids.logit_dropout == options.get("logit_dropout", 0.0)
    assert (aids.dropout_seed is None) == (not aids.logit_dropout)  # the seed travels only with dropout
    if impl == "chunked":
        assert kwargs["prune_tau"] == options["prune_tau"]


def test_the_implementations_take_their_options_by_keyword_only():
    q, k, v, g = tra_inputs(1, 1, 5, 5, 8, requires_grad=False)
    for impl in (tra_naive, tra_chunked, tra_surrogate, tra_key_gate_naive):
        with pytest.raises(TypeError, match="positional"):
            impl(q, k, v, g, 0.25, KeepRule())
    contract = {"scale": 0.25, "keep": KeepRule(0.0, local_window=2)}
    assert torch.equal(tra_naive(q, k, v, g, **contract), tra_naive(q, k, v, g, **contract, documents=NO_DOCUMENTS))


def test_an_implementation_refuses_the_aids_it_does_not_serve():
    q, k, v, g = tra_inputs(1, 1, 5, 5, 8, requires_grad=False)
    contract = {"scale": 0.25, "keep": KeepRule(0.0)}
    with pytest.raises(ValueError, match=r"^tra_naive: aids\.keep_surrogate = 0\.5; expected 0\.0: tra_naive does not"):
        tra_naive(q, k, v, g, **contract, aids=TrainingAids(keep_surrogate=0.5))
    with pytest.raises(ValueError, match=r"^tra_surrogate: aids\.keep_surrogate = 0\.0; expected a temperature > 0"):
        tra_surrogate(q, k, v, g, **contract, aids=NO_AIDS)
    with pytest.raises(ValueError, match=r"^tra_key_gate_naive: aids\.dropout_seed = 3; expected None"):
        tra_key_gate_naive(q, k, v, g, **contract, aids=TrainingAids(logit_dropout=0.1, dropout_seed=3))
    with pytest.raises(ValueError, match=r"^tra_key_gate_naive: aids\.keep_surrogate = 1\.0; expected 0\.0"):
        tra_key_gate_naive(q, k, v, g, **contract, aids=TrainingAids(keep_surrogate=1.0))
    decode = (q[:, :, -1:], k, v, g[:, :, -1:])
    stats = {"n_splits": 2, "forward_stats": chunked_forward_stats}
    for aids, name in ((TrainingAids(logit_dropout=0.1), "logit_dropout"), (TrainingAids(keep_surrogate=1), "keep")):
        with pytest.raises(ValueError, match=rf"^split_kv_attention: aids\.{name}\w* = .*does not serve it"):
            split_kv_attention(*decode, **contract, **stats, aids=aids)
    with pytest.raises(ValueError, match=r"^tra_chunked: prune_tau does not combine with keep_surrogate"):
        tra_chunked(q, k, v, g, **contract, aids=TrainingAids(logit_dropout=0.1), prune_tau=3.0)


def test_the_key_gate_op_serves_dropout_from_torchs_generator():
    q, k, v, g = tra_inputs(1, 2, 9, 9, 8, requires_grad=False)
    contract = {"scale": 0.25, "keep": KeepRule(0.0)}
    torch.manual_seed(0)
    first = tra_key_gate_naive(q, k, v, g, **contract, aids=TrainingAids(logit_dropout=0.3))
    torch.manual_seed(0)
    assert torch.equal(first, tra_key_gate_naive(q, k, v, g, **contract, aids=TrainingAids(logit_dropout=0.3)))
    assert not torch.allclose(first, tra_key_gate_naive(q, k, v, g, **contract))


@pytest.mark.parametrize("impl", ["naive", "chunked", "auto"])
def test_the_op_takes_the_contract_as_objects_exactly_as_its_keywords(impl):
    """keep=, documents= and aids= give the flat keywords' call bit for bit, forward and backward."""
    seg = torch.tensor([[0, 0, 0, 1, 1, 1, 1, -1, -1]])
    flat = {"threshold": 0.1, "local_window": 2, "sliding_window": 6, "segment_ids": seg, "logit_dropout": 0.2,
            "dropout_seed": 11, "keep_surrogate": 0.5}  # fmt: skip
    objects = {
        "keep": KeepRule(0.1, local_window=2, sliding_window=6),
        "documents": Documents(seg),
        "aids": TrainingAids(keep_surrogate=0.5, logit_dropout=0.2, dropout_seed=11),
    }
    results = []
    for options in (flat, objects):
        q, k, v, g = tra_inputs(1, 2, 9, 9, 8, seed=3)
        out = threshold_relative_attention(q, k, v, g, impl=impl, **options)
        out.square().sum().backward()
        results.append([out, q.grad, k.grad, v.grad, g.grad])
    for name, a, b in zip(("out", "dq", "dk", "dv", "dgate"), *results):
        assert torch.equal(a, b), name


MIXES = [
    ({"keep": KeepRule(0.5), "threshold": 0.2}, r"threshold = 0\.2; expected its default \(0\.0\) beside keep="),
    ({"keep": KeepRule(), "local_window": 3}, r"local_window = 3; expected its default \(0\) beside keep="),
    ({"aids": TrainingAids(), "logit_dropout": 0.1}, r"logit_dropout = 0\.1; expected its default \(0\.0\) beside"),
    ({"aids": NO_AIDS, "dropout_seed": 3}, r"dropout_seed = 3; expected its default \(None\) beside aids="),
    (
        {"documents": NO_DOCUMENTS, "key_padding_mask": torch.ones(1, 6)},
        r"key_padding_mask = .*expected its default \(None\) beside documents= \(pass the Documents alone, or "
        r"cu_seqlens, key_padding_mask, segment_ids alone\)",
    ),
    ({"keep": 0.5}, r"keep = 0\.5; expected None or a KeepRule"),
    ({"documents": torch.zeros(1, 6)}, r"documents = .*\(a Tensor\); expected None or a Documents"),
]


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "unvalidated"])
@pytest.mark.parametrize("options,pattern", MIXES)
def test_an_object_beside_its_own_keywords_is_refused(options, pattern, validate):
    """Also where a decoding step's shortcut would skip the checks: it never takes what it cannot read."""
    q, k, v, g = tra_inputs(1, 2, 1, 6, 8, requires_grad=False)
    with pytest.raises(ValueError, match=OP + pattern):
        threshold_relative_attention(q, k, v, g, validate=validate, **options)


def test_the_documents_object_is_checked_against_the_inputs():
    q, k, v, g = tra_inputs(1, 2, 6, 6, 8, requires_grad=False)
    with pytest.raises(ValueError, match=r"segment_ids\.shape = \(1, 4\)"):
        threshold_relative_attention(q, k, v, g, documents=Documents(torch.zeros(1, 4, dtype=torch.int32)))
