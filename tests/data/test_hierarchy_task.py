"""The hierarchy generator: structure, scope semantics of gets, splits, loss mask, text format and bad input."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tra_attn.cli import main
from tra_attn.data import make_task
from tra_attn.data.synthetic.hierarchy import (
    CLOSE,
    GET,
    MENTION,
    OPEN,
    PAD,
    SET,
    VALUE0,
    VARIABLE0,
    Hierarchy,
    decode,
    encode,
    statistics,
)

CONFIGS = [
    Hierarchy(),
    Hierarchy(r_count=2, conslen=3, depth=2, branching=2, num_variables=2, num_values=3, p_read=0.6, p_set=0.2),
    Hierarchy(r_count=1, conslen=6, depth=1, num_variables=1, p_read=0.5, p_set=0.5),
    Hierarchy(r_count=2, conslen=1, depth=5, p_read=0.1),
]


def reference_reads(row: list[int]) -> dict:
    """Reference semantics, written as a plain loop: the expected value of every get and some counts."""
    scopes: list[dict[int, int]] = []
    out = {"expected": {}, "top": 0, "depth": 0, "statements": [], "reads": 0, "visible": 0, "flat_wrong": 0}
    counts: list[int] = []
    last_set: dict[int, int] = {}
    t = 0
    while t < len(row) and row[t] != PAD:
        if row[t] == OPEN:
            out["top"] += not scopes
            scopes.append({})
            counts.append(0)
            out["depth"] = max(out["depth"], len(scopes))
            t += 1
        elif row[t] == CLOSE:
            scopes.pop()
            out["statements"].append(counts.pop())
            t += 1
        else:
            op, var, val = row[t : t + 3]
            counts[-1] += 1
            answer = None
            for scope in scopes:  # outer to inner: the innermost assignment wins
                answer = scope.get(var, answer)
            out["visible"] += any(scopes)
            if op == SET:
                scopes[-1][var] = val
                last_set[var] = val
            elif op == GET:
                assert answer is not None, f"get of an unassigned variable at token {t}"
                out["expected"][t + 2] = answer
                out["reads"] += 1
                out["flat_wrong"] += last_set[var] != answer
            t += 3
    assert not scopes and all(token == PAD for token in row[t:])
    return out


@pytest.mark.parametrize("task", CONFIGS)
def test_every_scored_token_is_the_value_the_open_scopes_give(task):
    batch = task.sample(200, task.structure_tokens + 5, seed=1)
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        expected = reference_reads(row)["expected"]
        assert [t for t, scored in enumerate(mask) if scored] == sorted(expected)
        assert all(row[t] == value for t, value in expected.items())
        assert all(row[t] == PAD for t in range(task.structure_tokens, len(row)))


def test_loss_mask_marks_exactly_the_values_after_gets():
    batch = Hierarchy(branching=2, depth=2).sample(50, 200, seed=4)
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        assert mask == [t >= 2 and row[t - 2] == GET for t in range(len(row))]
        assert all(VALUE0 <= row[t] < VALUE0 + 10 for t, scored in enumerate(mask) if scored)
    assert torch.equal(Hierarchy().loss_mask(batch.tokens), batch.loss_mask)


@pytest.mark.parametrize("task", CONFIGS)
def test_structure_and_statement_kinds_follow_the_parameters(task):
    batch = task.sample(400, task.structure_tokens, seed=2)
    found = [reference_reads(row) for row in batch.tokens.tolist()]
    assert all(f["top"] == task.r_count and f["depth"] == task.depth for f in found)
    assert all(f["statements"] == [task.conslen] * task.scopes for f in found)
    visible = sum(f["visible"] for f in found)  # gets are drawn only where some variable is assigned
    rate = sum(f["reads"] for f in found) / visible
    assert abs(rate - task.p_read) < 4 * (task.p_read * (1 - task.p_read) / visible) ** 0.5 + 1e-9
    ops = batch.tokens[:, : task.structure_tokens]
    mentions = (ops == MENTION).sum().item() / (task.scopes * task.conslen * 400)
    expected = 1 - task.p_read - task.p_set
    assert abs(mentions - expected) < 4 * (expected * (1 - expected) / (task.scopes * task.conslen * 400)) ** 0.5 + 1e-9
    variables = ops[(ops == SET).roll(1, 1)] - VARIABLE0
    assert set(variables.tolist()) == set(range(task.num_variables))


def test_statistics_of_the_splits_match_their_parameters():
    for split in Hierarchy().eval_splits(128, 64):
        p, stats = split.params, statistics(split.batch)
        assert split.length == split.batch.tokens.shape[1] == stats["length"]
        task = Hierarchy(**p)
        assert task.structure_tokens <= split.length and (
            split.length == 128 or task.structure_tokens > split.length // 2
        )
        assert stats["top_level_scopes"] == p["r_count"]
        assert stats["statements_per_scope"] == p["conslen"]
        assert stats["max_depth"] == p["depth"]
        assert stats["scopes_per_sequence"] == task.scopes
        assert stats["structure_tokens"] == task.structure_tokens
        assert stats["sequences_without_reads"] == 0 and stats["reads_per_sequence"] > 5
        assert stats["sequences"] == split.batch.tokens.shape[0] == max(1, 64 * 128 // split.length)
        assert 0 < stats["mean_read_distance"] <= stats["max_read_distance"] < split.length


def test_a_flat_last_assignment_rule_fails_on_some_gets():
    batch = Hierarchy().sample(300, 128, seed=3)
    found = [reference_reads(row) for row in batch.tokens.tolist()]
    wrong = sum(f["flat_wrong"] for f in found) / sum(f["reads"] for f in found)
    assert 0.05 < wrong == pytest.approx(statistics(batch)["scope_dependent_reads"])


def test_the_splits_differ_only_along_their_stated_axis():
    base = Hierarchy(r_count=2, conslen=3, depth=2, branching=2)
    splits = {s.split: s for s in base.eval_splits(96, 32)}
    assert list(splits) == ["iid", "ood_rcount", "ood_conslen", "ood_both"]
    iid = dataclasses.asdict(base)
    assert splits["iid"].params == iid and splits["iid"].length == 96
    for name, changed in (
        ("ood_rcount", {"r_count"}),
        ("ood_conslen", {"conslen"}),
        ("ood_both", {"r_count", "conslen"}),
    ):
        params = splits[name].params
        assert {k for k in iid if params[k] != iid[k]} == changed
        assert all(params[k] == 2 * iid[k] for k in changed)
    stats = {name: statistics(s.batch) for name, s in splits.items()}
    for key, axis in (("top_level_scopes", "r_count"), ("statements_per_scope", "conslen")):
        for name in splits:
            doubled = axis in {k for k in iid if splits[name].params[k] != iid[k]}
            assert stats[name][key] == stats["iid"][key] * (2 if doubled else 1), (name, key)
    assert all(stats[name]["max_depth"] == 2 for name in splits)


def test_eval_splits_use_test_seeds_and_refuse_a_short_training_length():
    first, second = Hierarchy().eval_splits(128, 16), Hierarchy().eval_splits(128, 16)
    assert all(torch.equal(a.batch.tokens, b.batch.tokens) for a, b in zip(first, second))
    with pytest.raises(ValueError, match=r"length = 100; expected an integer of at least 126 tokens"):
        Hierarchy().eval_splits(100, 16)


def test_same_seed_same_sequences():
    task = Hierarchy()
    assert torch.equal(task.sample(10, 128, 7).tokens, task.sample(10, 128, 7).tokens)
    assert not torch.equal(task.sample(10, 128, 7).tokens, task.sample(10, 128, 8).tokens)
    assert task.sample(0, 128, 7).tokens.shape == (0, 128)


def test_text_round_trip(tmp_path):
    task = Hierarchy(branching=2, depth=2)
    batch = task.sample(20, 130, seed=5)
    assert all(torch.equal(encode(decode(row)), row) for row in batch.tokens)
    path = tmp_path / "h.txt"
    task.write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line) == 130 for line in lines) and lines[0].endswith(".")
    (loaded,) = Hierarchy().read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)


def test_hand_written_sequences_follow_the_scope_rules():
    assert decode(encode("(=a1(=a2?a2(?a2=a3)?a2)?a1)(~b4=b5?b5)..")) == "(=a1(=a2?a2(?a2=a3)?a2)?a1)(~b4=b5?b5).."
    assert encode("(=a1?a1)").tolist() == [OPEN, SET, VARIABLE0, VALUE0 + 1, GET, VARIABLE0, VALUE0 + 1, CLOSE]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("", r"''; expected a non-empty string"),
        ("(=a1?A1)", r"'\(=a1\?A1\)'; expected a non-empty string of the characters"),
        ("(=a1?a1", r"1 scope\(s\) still open at token 7"),
        ("(=a1.?a1)", r"1 scope\(s\) still open at token 4"),
        ("(=a1)(?a1)", r"token 6 gets 'a', which no open scope assigns"),
        ("(=a1(=a2)?a2)", r"token 9 gets 'a' = '2'; the open scopes give '1'"),
        ("(~a1?a1)", r"token 4 gets 'a', which no open scope assigns"),
        ("(=a1)=a1", r"token 5 is '=' outside any scope"),
        ("(=1a)", r"token 1 is '=' not followed by a variable a-z and a value 0-9"),
        ("(=a)", r"token 1 is '=' not followed by a variable"),
        ("(a)", r"token 1 is 'a'; expected '\(', '\)' or a statement"),
        ("..(=a1)", r"no scope; expected a sequence that starts with '\('"),
        ("(=a1).(=a1)", r"token 5 starts the padding but later tokens are not '\.'"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=r"^hierarchy: malformed sequence .*" + pattern):
        encode(text)


def test_read_text_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("(=a1?a1)\n(=a1?b1)\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: hierarchy: malformed sequence .*gets 'b'"):
        Hierarchy().read_text(bad)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"r_count": 0}, r"r_count = 0; expected an integer >= 1"),
        ({"conslen": -2}, r"conslen = -2; expected an integer >= 1"),
        ({"conslen": 2.0}, r"conslen = 2\.0; expected an integer >= 1"),
        ({"branching": True}, r"branching = True; expected an integer >= 1"),
        ({"depth": 0}, r"depth = 0; expected an integer in \[1, 64\]"),
        ({"depth": 65}, r"depth = 65; expected an integer in \[1, 64\]"),
        ({"num_variables": 27}, r"num_variables = 27; expected an integer in \[1, 26\]"),
        ({"num_values": 1}, r"num_values = 1; expected an integer in \[2, 10\]"),
        ({"num_values": "10"}, r"num_values = '10'; expected an integer in \[2, 10\]"),
        ({"p_read": 1.0}, r"p_read = 1\.0; expected a probability in \(0, 1\)"),
        ({"p_read": -0.1}, r"p_read = -0\.1; expected a probability in \(0, 1\)"),
        ({"p_read": float("nan")}, r"p_read = nan; expected a probability in \(0, 1\)"),
        ({"p_read": 0.0}, r"p_read = 0\.0; expected a probability in \(0, 1\): the gets' values are the only scored"),
        ({"p_set": "0.4"}, r"p_set = '0\.4'; expected a probability in \(0, 1\)"),
        ({"p_set": 0}, r"p_set = 0; expected a probability in \(0, 1\): gets need assignments"),
        ({"p_read": 0.6, "p_set": 0.5}, r"p_read \+ p_set = 0\.6 \+ 0\.5; expected at most 1"),
    ],
)
def test_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match="^hierarchy: " + pattern):
        Hierarchy(**kwargs)


@pytest.mark.parametrize("length", [0, -4, 125, 128.0, True, "128"])
def test_bad_length(length):
    with pytest.raises(
        ValueError, match=r"length = .*; expected an integer of at least 126 tokens, the size of r_count = 3"
    ):
        Hierarchy().sample(3, length, 0)


@pytest.mark.parametrize("num", [-1, 2.0, True])
def test_bad_num(num):
    with pytest.raises(ValueError, match=r"num = .*; expected a non-negative integer"):
        Hierarchy().sample(num, 128, 0)


def test_task_registry():
    task = make_task("hierarchy", r_count=4, p_read=0.3)
    assert isinstance(task, Hierarchy) and (task.r_count, task.p_read, task.vocab_size) == (4, 0.3, 42)
    with pytest.raises(ValueError, match=r"unknown arguments \['rcount'\]"):
        make_task("hierarchy", rcount=4)


def test_tra_data_writes_the_task(tmp_path, capsys):
    out = tmp_path / "h.txt"
    assert main(["data", "hierarchy", "--r-count", "2", "--length", "96", "--num", "4", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["top_level_scopes"] == 2 and printed["sequences"] == 4
    assert len(out.read_text().splitlines()) == 4
    assert main(["data", "hierarchy", "--p-read", "1", "--out", str(out)]) == 2
    assert "p_read = 1.0; expected a probability" in capsys.readouterr().err
