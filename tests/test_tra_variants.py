"""TRA options studied on text (threshold warm-up: train with a lowered threshold, evaluate exact; dense
heads: some heads keep every causal key) and named variants (a kind with config fields changed, run as a
method of a comparison)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.experiments.engine import run_comparison, run_config
from tra_attn.experiments.flipflop import FLIPFLOP
from tra_attn.experiments.flipflop.presets import PRESETS
from tra_attn.experiments.runs import check_methods, preset_lr
from tra_attn.experiments.variants import VARIANTS, resolve_method
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import resolve_checkpoint
from tra_attn.training.threshold_warmup import lowered_threshold, tra_layers, warmup_threshold


def tiny(attention="tra", **overrides) -> TrainConfig:
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=2, n_heads=2, attention=attention)
    base = dict(
        task="flipflop",
        task_args={"p_ignore": 0.8, "final_read": True},
        model=model,
        length=16,
        steps=1,
        batch_size=4,
        lr=3e-3,
        eval_every=0,
        checkpoint_every=1,
    )
    return TrainConfig(**{**base, **overrides})


def weights(run_dir) -> dict:
    return TransformerLM.from_pretrained(resolve_checkpoint(run_dir)).state_dict()


def test_the_schedule_rises_in_four_stages_to_the_threshold():
    root = math.sqrt(64)
    seen = [warmup_threshold(step, 100, 0.0, 64) for step in range(101)]
    assert seen[0] == seen[24] == -root and seen[25] == seen[49] == -0.75 * root
    assert seen[50] == -0.5 * root and seen[75] == seen[99] == -0.25 * root and seen[100] == 0.0
    assert warmup_threshold(3, 4, -1.0, 4) == -1.5 and warmup_threshold(10, 0, 0.5, 4) == 0.5


def test_the_lowered_threshold_is_restored_even_when_the_step_raises():
    model = TransformerLM(ModelConfig(n_layers=2, d_model=32, n_heads=2, tra_threshold=0.25))
    layers = tra_layers(model)
    assert len(layers) == 2
    with pytest.raises(RuntimeError, match="boom"), lowered_threshold(model, 0, 10):
        assert all(layer.threshold == 0.25 - 4.0 for layer in layers)
        raise RuntimeError("boom")
    assert all(layer.threshold == 0.25 for layer in layers)
    with lowered_threshold(model, 10, 10):  # warm-up over: nothing changes
        assert all(layer.threshold == 0.25 for layer in layers)


def test_the_first_stage_keeps_every_key_and_training_after_warmup_is_exact(tmp_path):
    """One step at threshold -sqrt(D) is one step of TRA without a threshold (every causal key kept);
    without the warm-up the same step differs; the checkpoint is a threshold-0 model."""
    train(tiny(tra_threshold_warmup=4), tmp_path / "warm", progress=False)
    train(tiny("tra_nothreshold"), tmp_path / "all_keys", progress=False)
    train(tiny(), tmp_path / "exact", progress=False)
    warm, all_keys, exact = (weights(tmp_path / name) for name in ("warm", "all_keys", "exact"))
    for name in warm:
        torch.testing.assert_close(warm[name], all_keys[name], atol=1e-6, rtol=1e-6)
    assert any(not torch.allclose(warm[name], exact[name]) for name in warm)
    model = TransformerLM.from_pretrained(resolve_checkpoint(tmp_path / "warm"))
    assert all(layer.threshold == 0.0 for layer in tra_layers(model))


def test_warmup_needs_a_kind_with_a_threshold_and_old_configs_load_without_one():
    with pytest.raises(ValueError, match=r"tra_threshold_warmup = 5; expected 0 for attention = 'nope'"):
        tiny("nope", tra_threshold_warmup=5)
    with pytest.raises(ValueError, match=r"tra_threshold_warmup = 5; expected 0 for attention = 'tra_nothreshold'"):
        tiny("tra_nothreshold", tra_threshold_warmup=5)
    with pytest.raises(ValueError, match=r"tra_threshold_warmup = -1; expected a non-negative integer"):
        tiny(tra_threshold_warmup=-1)
    data = {**tiny().to_dict(), "version": 2}
    del data["tra_threshold_warmup"]
    assert TrainConfig.from_dict(data).tra_threshold_warmup == 0


def layer_pair(kind: str, dense: int):
    """A TRA layer with ``dense`` dense heads, and a copy of its weights as a threshold-free layer."""
    config = dict(vocab_size=13, d_model=32, n_layers=1, n_heads=4, attention=kind)
    model = TransformerLM(ModelConfig(**config, tra_dense_heads=dense)).double()
    free = TransformerLM(ModelConfig(**config)).double()
    free.load_state_dict(model.state_dict())
    free.blocks[0].attn.threshold = float("-inf")
    return model, free


@pytest.mark.parametrize("kind", ["tra", "tra_keygate", "tra_nodistance"])
def test_dense_heads_keep_every_key_and_the_others_are_exact_tra(kind):
    torch.manual_seed(0)
    model, free = layer_pair(kind, 2)
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    layer, free_layer = model.blocks[0].attn, free.blocks[0].attn
    q, k, v = (layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    mixed = layer.attend(x, q, k, v, None)
    layer.dense_heads = 0
    thresholded = layer.attend(x, q, k, v, None)
    everything = free_layer.attend(x, q, k, v, None)
    torch.testing.assert_close(mixed[:, :2], everything[:, :2], atol=0, rtol=0)
    torch.testing.assert_close(mixed[:, 2:], thresholded[:, 2:], atol=0, rtol=0)
    assert not torch.allclose(mixed[:, :2], thresholded[:, :2])


def test_all_heads_dense_is_tra_without_a_threshold_and_caches_agree():
    torch.manual_seed(1)
    model, free = layer_pair("tra", 4)
    ids = torch.randint(0, 13, (2, 23))
    config = {k: v for k, v in free.config.to_dict().items() if k != "version"}
    nothreshold = TransformerLM(ModelConfig(**{**config, "attention": "tra_nothreshold"})).double()
    nothreshold.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(ids), nothreshold(ids), atol=0, rtol=0)
    model, _ = layer_pair("tra", 1)
    cache = model.new_cache()
    parts = torch.cat([model(ids[:, :9], cache=cache), model(ids[:, 9:], cache=cache)], dim=1)
    torch.testing.assert_close(parts, model(ids), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"tra_dense_heads": 5}, r"tra_dense_heads = 5; expected an integer from 0 to n_heads = 4"),
        ({"tra_dense_heads": -1}, r"tra_dense_heads = -1; expected an integer from 0 to n_heads = 4"),
        ({"tra_dense_heads": 1, "attention": "fox"}, r"tra_dense_heads = 1; expected 0 for attention = 'fox'"),
    ],
)
def test_bad_dense_heads(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(**{"n_heads": 4, **overrides})


def test_variants_resolve_to_their_kind_and_fields():
    assert resolve_method("fox").attention == "fox" and resolve_method("fox").model == {}
    config = run_config(FLIPFLOP, PRESETS["tiny"], "tra_warmup", 1e-3, 0, None, "cpu")
    assert (
        config.model.attention == "tra"
        and config.tra_threshold_warmup == VARIANTS["tra_warmup"].train["tra_threshold_warmup"]
    )
    config = run_config(FLIPFLOP, PRESETS["tiny"], "tra_paperblock", 1e-3, 0, None, "cpu")
    assert config.model.block_style == "paper" and config.model.d_model == PRESETS["tiny"].model["d_model"]
    assert preset_lr({}, None, "tra_gate3") == preset_lr({}, None, "tra")
    assert (
        preset_lr({"tra": 5e-3}, 1e-4, "tra_dense1") == 5e-3
        and preset_lr({"tra_dense1": 2e-3}, None, "tra_dense1") == 2e-3
    )
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['tra_sharp'\]; expected names from \[.*tra_warmup"):
        check_methods(["tra", "tra_sharp"])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_builds_a_valid_config_that_differs_from_its_kind(variant):
    preset = PRESETS["cpu"]
    config, base = (run_config(FLIPFLOP, preset, name, 1e-3, 0) for name in (variant, VARIANTS[variant].attention))
    assert config.to_dict() != base.to_dict()


def test_a_variant_runs_as_a_method_of_a_comparison(tmp_path):
    out = run_comparison(FLIPFLOP, "tiny", methods=["tra", "tra_threshold-1"], out=tmp_path, progress=False)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["method"] for r in rows} == {"tra", "tra_threshold-1"}
    assert {r["config"]["model"]["tra_threshold"] for r in rows if r["method"] == "tra_threshold-1"} == {-1.0}
    assert re.search(r"\| tra_threshold-1( †)? \| 0\.003 \| 1 \|", (out / "results.md").read_text())
