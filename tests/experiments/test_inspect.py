"""`tra inspect`: the keep decisions and attention weights it reports are the layer's own, and the roles the
tasks give their keys are right."""

from __future__ import annotations

import json

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.cli import main
from tra_attn.data import make_task
from tra_attn.layers.tra_inspect import attention_map
from tra_attn.ops.masks import masked_softmax
from tra_attn.ops.tra.naive import keep_mask, tra_logits
from tra_attn.training import TrainConfig, train


@pytest.mark.parametrize("kind", ["tra", "tra_keygate", "tra_nodistance", "tra_nothreshold"])
def test_the_weights_are_the_layers_own_and_rows_sum_to_one_where_a_key_is_kept(kind):
    from tests.conftest import attention_fields

    torch.manual_seed(0)
    options = {"local_window": 3, "dense_heads": 1, "dense_window": 5} if kind != "tra_nothreshold" else {}
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=32, n_heads=4, **attention_fields(kind, **options)))
    layer = model.double().eval().blocks[0].attn
    x = torch.randn(2, 13, 32, dtype=torch.float64)
    amap = attention_map(layer, x)
    v = torch.randn(2, 4, 13, 8, dtype=torch.float64)
    q, k = layer.normalize(*(layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj)))
    torch.testing.assert_close(amap.weights @ v, layer.by_heads(q, k, v, layer.log_gate(x)), atol=1e-12, rtol=1e-12)
    sums = amap.weights.sum(-1)
    kept_any = amap.keep.any(-1)
    torch.testing.assert_close(sums[kept_any], torch.ones_like(sums[kept_any]))
    assert (amap.weights[~amap.keep] == 0).all() and (sums[~kept_any] == 0).all()
    assert (amap.count[..., 0] == amap.keep.sum(-1)).all()


def test_window_only_keys_are_kept_keys_whose_score_is_not_above_the_threshold():
    torch.manual_seed(1)
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_heads=2, attention_options={"local_window": 4}))
    layer = model.double().eval().blocks[0].attn
    x = torch.randn(1, 17, 16, dtype=torch.float64)
    amap = attention_map(layer, x)
    q, k = layer.normalize(*(layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj)))
    scores, keep, logits = tra_logits(q, k, layer.log_gate(x), layer.head_dim**-0.5, 0.0, local_window=4)
    assert torch.equal(amap.keep, keep) and torch.equal(amap.window_only, keep & (scores <= 0))
    assert torch.equal(keep_mask(scores, 0.0) | amap.window_only, keep)
    torch.testing.assert_close(amap.weights, masked_softmax(logits, keep), atol=1e-12, rtol=1e-12)
    assert amap.window_only.any()


def test_the_roles_of_majority_keys():
    task = make_task("majority", num_marked=3)
    tokens = task.encode_text("*1.0*01*1?1")[None]
    names, roles = task.key_roles(tokens)
    assert [names[r] for r in roles[0].tolist()] == [
        "marker", "marked bit", "blank", "distractor bit", "marker", "marked bit", "distractor bit", "marker",
        "marked bit", "query or answer", "query or answer",
    ]  # fmt: skip


def test_the_roles_of_mqar_keys_depend_on_the_query():
    task = make_task("mqar", num_pairs=2, num_keys=4, num_values=4)
    tokens = task.encode_text("k1 v2 k3 v0 . | k3 v0 k1 v2")[None]
    names, roles = task.key_roles(tokens)
    first, second = (roles[0, i, : i + 1].tolist() for i in (6, 8))  # the queries k3 and k1
    assert [names[r] for r in first] == [
        "other pair", "other pair", "bound key", "bound value", "filler", "separator", "the query",
    ]  # fmt: skip
    assert [names[r] for r in second][:2] == ["bound key", "bound value"]
    assert [names[r] for r in second][6:] == ["earlier query", "earlier query", "the query"]


def test_the_roles_of_flipflop_keys_point_at_the_latest_write():
    task = make_task("flipflop")
    tokens = task.encode_text("w1i0w0r0")[None]
    names, roles = task.key_roles(tokens)
    assert [names[r] for r in roles[0, 6, :7].tolist()] == [
        "older write", "older write", "ignore", "ignore", "latest write", "latest write", "the read",
    ]  # fmt: skip


def test_inspect_a_run_writes_the_page_and_rows(tmp_path, capsys):
    model = ModelConfig(vocab_size=5, d_model=16, n_layers=1, n_heads=2, attention_options={"local_window": 2})
    config = TrainConfig(task="majority", task_args={"num_marked": 3}, model=model, length=24, steps=2, batch_size=4)
    config.eval_every, config.checkpoint_every = 0, 2
    train(config, tmp_path / "run", progress=False)
    argv = ["inspect", "--checkpoint", str(tmp_path / "run"), "--lengths", "1", "2", "--sequences", "4"]
    argv += ["--labels", "seed0", "--out", str(tmp_path / "page.md"), "--rows", str(tmp_path / "rows.jsonl")]
    assert main(argv) == 0
    page = (tmp_path / "page.md").read_text()
    assert "| run | 24 tokens | 48 tokens |" in page and "| seed0 | 0 | 1 |" in page
    assert "| run | layer | head | marked bit | marker | distractor bit | blank | query or answer |" in page
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    accuracy = [r for r in rows if r["metric"] == "full_seq_acc"]
    assert [r["length"] for r in accuracy] == [24, 48] and all(0 <= r["value"] <= 1 for r in accuracy)
    masses = [r["value"] for r in rows if r["length"] == 24 and r["layer"] == 0 and r["metric"].startswith("mass: ")]
    assert len(masses) == 2 * 5 and sum(masses) == pytest.approx(2.0)  # per head, the roles share all the mass
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--lengths", "0"], r"--lengths = \(0,\); expected positive multiples"),
        (["--sequences", "0"], r"--sequences = 0; expected a positive number"),
        (["--labels", "a", "b"], r"--labels: 2 labels for 1 checkpoints; expected one each"),
        (["--labels", ""], r"--labels: \[''\]; expected names that are not empty"),
        (["--labels", " a"], r"--labels: \[' a'\]; expected names that are not empty and do not begin or end with"),
    ],
)
def test_bad_inspect_arguments_are_refused(argv, pattern, tmp_path, capsys):
    assert main(["inspect", "--checkpoint", str(tmp_path), *argv]) == 2
    assert __import__("re").search(pattern, capsys.readouterr().err)


def test_every_inspected_run_has_a_label_of_its_own(tmp_path):
    """Tables are keyed by label: two runs under one label were merged into one row."""
    from tra_attn.experiments.inspect import run_labels

    a, b = tmp_path / "seed0" / "run", tmp_path / "seed1" / "run"
    assert run_labels([a, tmp_path / "other"]) == ["run", "other"]
    assert run_labels([a, b]) == [str(a), str(b)]  # folders of the same name: their paths
    assert run_labels([a, b], ["x", "y"]) == ["x", "y"]
    with pytest.raises(ValueError, match=r"--labels: \['x'\] name more than one checkpoint"):
        run_labels([a, b], ["x", "x"])
    with pytest.raises(ValueError, match=r"--labels: \[.*seed0/run'\] name more than one checkpoint"):
        run_labels([a, a])
