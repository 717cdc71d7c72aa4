"""TRA options studied on text (threshold warm-up: train with a lowered threshold, evaluate exact; dense
heads: some heads keep every causal key) and named variants (a kind with options or config fields changed,
run as a method of a comparison)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil

import pytest
import torch

from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM
from tra_attn.experiments.engine import run_config
from tra_attn.experiments.flipflop import FLIPFLOP
from tra_attn.experiments.flipflop.presets import PRESETS
from tra_attn.experiments.methods import Method, every_kind
from tra_attn.experiments.spec import Question
from tra_attn.layers.tra import TRAAttention
from tra_attn.layers.tra_warmup import warmup_threshold
from tra_attn.ops.tra import KeepRule
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import list_checkpoints, resolve_checkpoint
from tra_attn.upgrade.configs import FLAT_OPTIONS, upgrade_model_config, upgrade_train_config
from tra_attn.upgrade.files import upgrade
from tra_attn.utils.dataclass_io import OldVersion

NO_THRESHOLD = {"threshold": -math.inf}  # the ablation that keeps every causal key (formerly tra_nothreshold)
# The ablations of the TRA layer that keep its threshold: their options (the former kinds tra_keygate, tra_nodistance).
ABLATIONS = {"tra": {}, "keygate": {"gate": "key"}, "nodistance": {"distance": False}}


def tiny(attention="tra", warmup=0, options=None, **overrides) -> TrainConfig:
    options = {**(options or {}), **({"threshold_warmup": warmup} if warmup else {})}
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=2, n_heads=2, attention=attention, attention_options=options)
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


def tra_layers(model) -> list[TRAAttention]:
    return [m for m in model.modules() if isinstance(m, TRAAttention)]


def test_the_layer_owns_the_warmup_training_forwards_are_staged_evaluation_is_exact():
    torch.manual_seed(0)
    config = dict(vocab_size=13, n_layers=2, d_model=32, n_heads=2)  # head_dim 16: sqrt 4
    model = TransformerLM(ModelConfig(**config, attention_options={"threshold": 0.25, "threshold_warmup": 10}))
    layers = tra_layers(model)
    assert len(layers) == 2 and all(layer.current_threshold() == 0.25 for layer in layers)  # no step set yet
    ids = torch.randint(0, 13, (2, 19))
    lowered, exact = (TransformerLM(ModelConfig(**config, attention_options={"threshold": t})) for t in (-3.75, 0.25))
    lowered.load_state_dict(model.state_dict()), exact.load_state_dict(model.state_dict())
    model.set_train_step(0)
    assert all(layer.current_threshold() == 0.25 - 4.0 for layer in layers)
    torch.testing.assert_close(model(ids), lowered(ids), atol=0, rtol=0)
    assert not torch.allclose(model(ids), exact(ids))
    model.eval()  # validation and evaluation: the exact threshold, whatever the step
    assert all(layer.current_threshold() == 0.25 for layer in layers)
    torch.testing.assert_close(model(ids), exact.eval()(ids), atol=0, rtol=0)
    model.train()
    model.set_train_step(7)
    assert all(layer.current_threshold() == warmup_threshold(7, 10, 0.25, 16) == 0.25 - 2.0 for layer in layers)
    model.set_train_step(10)  # warm-up over
    assert all(layer.current_threshold() == 0.25 for layer in layers)


def test_the_first_stage_keeps_every_key_and_training_after_warmup_is_exact(tmp_path):
    """One step at threshold -sqrt(D) is one step of TRA without a threshold (every causal key kept);
    without the warm-up the same step differs; the checkpoint is a threshold-0 model."""
    train(tiny(warmup=4), tmp_path / "warm", progress=False)
    train(tiny(options=NO_THRESHOLD), tmp_path / "all_keys", progress=False)
    train(tiny(), tmp_path / "exact", progress=False)
    warm, all_keys, exact = (weights(tmp_path / name) for name in ("warm", "all_keys", "exact"))
    for name in warm:
        torch.testing.assert_close(warm[name], all_keys[name], atol=1e-6, rtol=1e-6)
    assert any(not torch.allclose(warm[name], exact[name]) for name in warm)
    model = TransformerLM.from_pretrained(resolve_checkpoint(tmp_path / "warm"))
    assert model.config.attention_options.threshold_warmup == 4
    assert all(layer.options.threshold == 0.0 and layer.current_threshold() == 0.0 for layer in tra_layers(model))


def test_warmup_needs_a_kind_with_a_threshold_and_old_configs_load_without_one():
    with pytest.raises(ValueError, match=r"\['threshold_warmup'\] are not options of attention = 'nope'"):
        tiny("nope", warmup=5)
    with pytest.raises(
        ValueError, match=r"TRAOptions\.threshold_warmup = 5 with TRAOptions\.threshold = -inf; expected threshold_warm"
    ):
        tiny(options=NO_THRESHOLD, warmup=5)
    with pytest.raises(ValueError, match=r"TRAOptions.threshold_warmup = -1; expected a non-negative integer"):
        tiny(warmup=-1)
    data = {**as_version_5(tiny().to_dict()), "version": 2}
    with pytest.raises(OldVersion, match=r"TrainConfig version 2, written by an earlier version of tra"):
        TrainConfig.from_dict(data)
    assert TrainConfig.from_dict(upgrade_train_config(data)).model.attention_options.threshold_warmup == 0


def flat_model(model: dict) -> dict:
    """A current model config dict as 0.2 (version 6) wrote it: TRA's options as flat tra_* fields, no version
    (a TrainConfig nested its model without one)."""
    model = {k: v for k, v in model.items() if k != "version"}
    options = model.pop("attention_options")
    flat = {k if k == "gate_bias_init" else f"tra_{k}": v for k, v in options.items()}
    flat = {k: v for k, v in flat.items() if k in FLAT_OPTIONS}  # the options 0.2 had
    return {**model, **flat, "rope_base": 1e4, "cope_max_pos": 64}


def as_version_5(train_config: dict) -> dict:
    """A current TrainConfig dict as 0.2 (version 5) wrote it."""
    return {**train_config, "version": 5, "model": flat_model(train_config["model"])}


def as_version_4(train_config: dict) -> dict:
    """A current TrainConfig dict as version 4 wrote it: the warm-up a training field, not a model one."""
    v5 = as_version_5(train_config)
    model = dict(v5["model"])
    warmup = model.pop("tra_threshold_warmup")
    return {**v5, "version": 4, "tra_threshold_warmup": warmup, "model": model}


def upgraded_train(data: dict) -> TrainConfig:
    """``data``, a TrainConfig dict of an earlier version: refused as it is, read once upgraded."""
    with pytest.raises(OldVersion, match=rf"TrainConfig version {data['version']}, written by an earlier version"):
        TrainConfig.from_dict(data)
    return TrainConfig.from_dict(upgrade_train_config(data))


def test_version_4_configs_move_the_warmup_into_the_model():
    v4 = as_version_4(tiny(warmup=6).to_dict())
    assert "tra_threshold_warmup" not in v4["model"]
    loaded = upgraded_train(v4)
    assert loaded == tiny(warmup=6) and loaded.model.attention_options.threshold_warmup == 6
    assert upgraded_train(as_version_4(tiny().to_dict())) == tiny()
    assert upgraded_train(as_version_5(tiny(warmup=6).to_dict())) == tiny(warmup=6)
    model_v4 = {**flat_model(tiny(warmup=6).model.to_dict()), "version": 4}
    del model_v4["tra_threshold_warmup"]
    with pytest.raises(OldVersion, match=r"ModelConfig version 4, written by an earlier version of tra"):
        ModelConfig.from_dict(model_v4)
    loaded = ModelConfig.from_dict(upgrade_model_config(model_v4))
    assert loaded.attention_options.threshold_warmup == 0  # a model config of its own: no warm-up
    current = {k: v for k, v in loaded.to_dict().items() if k != "attention_options"}  # version 8
    with pytest.raises(ValueError, match=r"missing fields \['attention_options'\]"):
        ModelConfig.from_dict(current)
    with pytest.raises(ValueError, match=r"unknown fields \['tra_threshold_warmup'\]"):  # not a field of version 5
        TrainConfig.from_dict(upgrade_train_config({**v4, "version": 5}))


def test_a_version_4_run_resumed_mid_warmup_still_warms_up(tmp_path):
    """A version-4 checkpoint holds the warm-up in train_config.json only (its config.json is a version-4
    ModelConfig, without it): refused until `tra upgrade` converts it, then resumed mid-warm-up, it must train
    exactly as the run that never stopped."""
    config = tiny(warmup=8, steps=8, checkpoint_every=4)
    train(config, tmp_path / "straight", progress=False)
    shutil.copytree(tmp_path / "straight", tmp_path / "v4")
    halfway, last = list_checkpoints(tmp_path / "v4")
    shutil.rmtree(last)
    for path in (tmp_path / "v4" / "train_config.json", halfway / "train_config.json"):
        path.write_text(json.dumps(as_version_4(json.loads(path.read_text()))))
    model_json = flat_model(json.loads((halfway / "config.json").read_text()))
    del model_json["tra_threshold_warmup"]
    (halfway / "config.json").write_text(json.dumps({**model_json, "version": 4}))
    with pytest.raises(OldVersion, match=rf"{halfway}/config\.json: ModelConfig version 4, .*`tra upgrade"):
        TransformerLM.from_pretrained(halfway)
    with pytest.raises(ValueError, match=rf"{halfway}/train_config\.json: TrainConfig version 4, .*`tra upgrade"):
        train(config, tmp_path / "v4", resume=True, progress=False)
    converted = [tmp_path / "v4" / "train_config.json", halfway / "config.json", halfway / "train_config.json"]
    assert sorted(upgrade(tmp_path / "v4")) == sorted(converted)
    saved = TrainConfig.from_dict(json.loads((halfway / "train_config.json").read_text()))
    assert saved == config
    assert TransformerLM.from_pretrained(halfway).config.attention_options.threshold_warmup == 0
    train(saved, tmp_path / "v4", resume=True, progress=False)
    resumed, straight = weights(tmp_path / "v4"), weights(tmp_path / "straight")
    assert all(torch.equal(resumed[name], straight[name]) for name in straight)


def layer_pair(ablation: str, dense: int):
    """A TRA layer (with the options of ``ablation``) with ``dense`` dense heads, and a copy of its weights without a
    threshold."""
    config = dict(vocab_size=13, d_model=32, n_layers=1, n_heads=4)
    options = ABLATIONS[ablation]
    model = TransformerLM(ModelConfig(**config, attention_options={**options, "dense_heads": dense})).double()
    free = TransformerLM(ModelConfig(**config, attention_options={**options, **NO_THRESHOLD})).double()
    free.load_state_dict(model.state_dict())
    return model, free


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_dense_heads_keep_every_key_and_the_others_are_exact_tra(ablation):
    torch.manual_seed(0)
    model, free = layer_pair(ablation, 2)
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    layer, free_layer = model.blocks[0].attn, free.blocks[0].attn
    q, k, v = (layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    mixed = layer.attend(x, q, k, v, None)
    layer.options = dataclasses.replace(layer.options, dense_heads=0)  # the layer reads its options every forward
    thresholded = layer.attend(x, q, k, v, None)
    everything = free_layer.attend(x, q, k, v, None)
    # To fp64 rounding: the key-gate ablation's materialised products run on a slice of the heads in one and on
    # all of them in the other, and a BLAS may block the two apart.
    torch.testing.assert_close(mixed[:, :2], everything[:, :2], atol=1e-15, rtol=1e-13)
    torch.testing.assert_close(mixed[:, 2:], thresholded[:, 2:], atol=1e-15, rtol=1e-13)
    assert not torch.allclose(mixed[:, :2], thresholded[:, :2])


def test_all_heads_dense_is_tra_without_a_threshold_and_caches_agree():
    torch.manual_seed(1)
    model, free = layer_pair("tra", 4)
    ids = torch.randint(0, 13, (2, 23))
    config = {k: v for k, v in free.config.to_dict().items() if k not in ("version", "attention_options")}
    nothreshold = TransformerLM(ModelConfig(**config, attention_options=NO_THRESHOLD)).double()
    nothreshold.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(ids), nothreshold(ids), atol=0, rtol=0)
    model, _ = layer_pair("tra", 1)
    cache = model.new_cache()
    parts = torch.cat([model(ids[:, :9], cache=cache), model(ids[:, 9:], cache=cache)], dim=1)
    torch.testing.assert_close(parts, model(ids), atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_the_layer_gives_the_local_window_to_thresholded_heads_and_the_dense_window_to_dense_heads(ablation):
    torch.manual_seed(0)
    config = dict(vocab_size=13, d_model=32, n_layers=1, n_heads=4)
    windows = {**ABLATIONS[ablation], "dense_heads": 2, "local_window": 3, "dense_window": 4}
    model = TransformerLM(ModelConfig(**config, attention_options=windows)).double().eval()  # the layer normalises
    plain_options = {**ABLATIONS[ablation], "dense_heads": 2}
    plain = TransformerLM(ModelConfig(**config, attention_options=plain_options)).double()
    plain.load_state_dict(model.state_dict())
    layer, plain_layer = model.blocks[0].attn, plain.blocks[0].attn
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    q, k, v = (layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    windowed = layer.attend(x, q, k, v, None)
    qn, kn = layer.normalize(q, k)
    gate = layer.log_gate(x)  # at the query positions; for the key gate, the same values at the keys
    assert layer.keep_rules() == (KeepRule(-math.inf, sliding_window=4), KeepRule(0.0, local_window=3))
    dense = layer.op(qn[:, :2], kn[:, :2], v[:, :2], gate[:, :2], KeepRule(-math.inf, sliding_window=4))
    sparse = layer.op(qn[:, 2:], kn[:, 2:], v[:, 2:], gate[:, 2:], KeepRule(0.0, local_window=3))
    torch.testing.assert_close(windowed, torch.cat([dense, sparse], dim=1), atol=0, rtol=0)
    unwindowed = plain_layer.attend(x, q, k, v, None)
    assert not torch.allclose(windowed[:, :2], unwindowed[:, :2])  # the window binds at length 19
    assert not torch.allclose(windowed[:, 2:], unwindowed[:, 2:])  # some keys are kept only locally


def test_version_5_model_configs_load_without_windows():
    data = {**flat_model(ModelConfig(attention_options={"dense_heads": 1}).to_dict()), "version": 5}
    del data["tra_local_window"], data["tra_dense_window"]
    with pytest.raises(OldVersion, match=r"ModelConfig version 5, written by an earlier version of tra"):
        ModelConfig.from_dict(data)
    loaded = ModelConfig.from_dict(upgrade_model_config(data))
    assert loaded == ModelConfig(attention_options={"dense_heads": 1})
    assert loaded.attention_options.local_window == loaded.attention_options.dense_window == 0


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"dense_heads": 5}, r"TRAOptions.dense_heads = 5; expected at most n_heads = 4"),
        ({"dense_heads": -1}, r"TRAOptions.dense_heads = -1; expected a non-negative integer"),
    ],
)
def test_bad_dense_heads(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(n_heads=4, attention_options=overrides)
    with pytest.raises(ValueError, match=r"\['dense_heads'\] are not options of attention = 'fox'; its options: "):
        ModelConfig(attention="fox", attention_options={"dense_heads": 1})


def tiny_question(*methods):
    return Question("x?", "flipflop", methods, (0,), lrs=(1e-3,), lrs_source="a test", preset="tiny")


def test_a_method_builds_its_kind_with_its_fields():
    warmup, paper = Method("tra", options={"threshold_warmup": 150}), Method("tra", model={"block_style": "paper"})
    question = tiny_question(warmup, paper)
    config = run_config(FLIPFLOP, question, warmup, 1e-3, 0)
    assert config.model.attention == "tra" and config.model.attention_options.threshold_warmup == 150
    config = run_config(FLIPFLOP, question, paper, 1e-3, 0)
    assert config.model.block_style == "paper" and config.model.d_model == PRESETS["tiny"].model["d_model"]


def test_every_built_in_kind_has_its_own_label_and_colour():
    from tra_attn.experiments.methods import ABLATIONS, KIND_STYLE

    assert set(ATTENTION_KINDS) <= set(KIND_STYLE)
    methods = [*every_kind(), *ABLATIONS]
    colours = [m.color for m in methods]
    assert len(set(colours)) == len(colours) and len({m.label for m in methods}) == len(methods)


VARIANTS = [
    {"dense_heads": 3},
    {"dense_heads": 1, "dense_window": 8},
    {"local_window": 4},
    {"local_window": 2, "dense_heads": 1, "dense_window": 16},
    {"local_window": 4, "keep_surrogate": 1.0},
    {"keep_surrogate": 0.5},
    {"threshold": -1.0},
    {"gate": "key"},
    {"threshold": -math.inf},
    {"distance": False},
]


@pytest.mark.parametrize("options", VARIANTS, ids=str)
def test_every_variant_builds_a_valid_config_that_differs_from_its_kind(options):
    variant, base = Method("tra", options=options), Method("tra")
    question = Question("x?", "flipflop", (variant, base), (0,))
    config, plain = (run_config(FLIPFLOP, question, m, 1e-3, 0) for m in (variant, base))
    assert config.to_dict() != plain.to_dict()


def test_a_variant_runs_in_a_question(tmp_path, capsys):
    from tests.questions import write_question
    from tra_attn.cli import main
    from tra_attn.experiments.store import Evidence

    folder = write_question(tmp_path, "flipflop", kinds=("tra",), lrs=(3e-3,))
    spec = folder / "spec.py"
    spec.write_text(spec.read_text().replace("methods=kinds(*('tra',)),", "methods=(*kinds('tra'), Method('tra', "
                                             "options={'threshold': -1.0})),").replace(
        "import kinds", "import Method, kinds"))  # fmt: skip
    assert main([str(a) for a in ["run", folder, "--store", tmp_path / "store", "--no-progress", "--no-plots"]]) == 0
    capsys.readouterr()
    evidence = Evidence(folder.parent / "runs")
    thresholds = {evidence.get(r).config["model"]["attention_options"]["threshold"] for r in evidence.runs()}
    assert thresholds == {0.0, -1.0}
    page = (folder / "README.md").read_text()
    assert re.search(r"\| TRA \(threshold=-1\)( †)? \| 0\.003 \| 1 \|", page)
    assert re.search(r"\| TRA \(threshold=-1\) \| `tra` \| threshold=-1 \| [\d,]+ \| 0\.003 \(given\) \|", page)


def test_the_threshold_shift_acts_in_training_forwards_only():
    torch.manual_seed(3)
    config = dict(vocab_size=13, n_layers=1, d_model=32, n_heads=2)
    shifted = TransformerLM(ModelConfig(**config, attention_options={"threshold_shift": -0.5}))
    plain = TransformerLM(ModelConfig(**config, attention_options={"threshold": -0.5}))
    exact = TransformerLM(ModelConfig(**config))
    plain.load_state_dict(shifted.state_dict()), exact.load_state_dict(shifted.state_dict())
    ids = torch.randint(0, 13, (2, 19))
    assert tra_layers(shifted)[0].current_threshold() == -0.5
    torch.testing.assert_close(shifted(ids), plain.train()(ids), atol=0, rtol=0)
    torch.testing.assert_close(shifted.eval()(ids), exact.eval()(ids), atol=0, rtol=0)


def test_the_keep_penalty_is_a_hinge_on_the_thresholded_heads_scores_outside_the_window():
    torch.manual_seed(4)
    options = {"keep_penalty": 0.3, "keep_margin": 0.25, "local_window": 2, "dense_heads": 1}
    model = TransformerLM(ModelConfig(vocab_size=13, n_layers=1, d_model=32, n_heads=4, attention_options=options))
    ids = torch.randint(0, 13, (2, 11))
    model.eval()(ids)
    assert model.auxiliary_loss() is None  # evaluation: no penalty
    model.train()(ids)
    layer = model.blocks[0].attn
    x = model.blocks[0].norm1(model.embed(ids))
    q, k = layer.normalize(*(layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj)))
    scores = (q[:, 1:] @ k[:, 1:].transpose(-1, -2)) / 8**0.5
    i, j = torch.arange(11)[:, None], torch.arange(11)[None, :]
    outside = (i - j) >= 2  # causal, beyond the local window of 2
    expected = 0.3 * torch.relu(scores + 0.25)[..., outside].mean()
    torch.testing.assert_close(model.auxiliary_loss(), expected)
    model.auxiliary_loss().backward()
    assert layer.q_proj.weight.grad.abs().sum() > 0
    plain = TransformerLM(ModelConfig(vocab_size=13, n_layers=1, d_model=32, n_heads=4)).train()
    plain(ids)
    assert plain.auxiliary_loss() is None


def test_a_run_with_the_keep_penalty_trains_and_logs_the_task_loss(tmp_path):
    config = tiny(steps=3, checkpoint_every=3)
    model = dataclasses.replace(config.model, attention_options={"keep_penalty": 1.0, "threshold_shift": 0.1})
    train(dataclasses.replace(config, model=model), tmp_path / "penalised", progress=False)
    train(config, tmp_path / "plain", progress=False)
    penalised, plain = weights(tmp_path / "penalised"), weights(tmp_path / "plain")
    assert any(not torch.equal(penalised[name], plain[name]) for name in plain)
    logged = [json.loads(line) for line in (tmp_path / "penalised" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(row["loss"]) for row in logged if "loss" in row)


@pytest.mark.parametrize("options", [{}, {"local_window": 4, "keep_surrogate": 1.0}, {"dense_heads": 1}], ids=str)
def test_a_training_forward_lets_the_op_normalise_q_and_k(monkeypatch, options):
    """In training without a cache the TRA layer hands q and k to the op unnormalised (qk_norm_eps: the CPU
    kernels normalise in their own passes); the loss and every gradient are those of the layer normalising them."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, d_model=32, n_layers=2, n_heads=4, attention="tra", dropout=0.0,
                         attention_options=options)  # fmt: skip
    model = TransformerLM(config).double().train()
    ids = torch.randint(0, 32, (2, 70))

    def loss_and_grads():
        model.zero_grad()
        loss = model(ids[:, :-1], labels=ids[:, 1:]).mean()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    assert all(block.attn.op_normalizes(None) for block in model.blocks)
    fused = loss_and_grads()
    monkeypatch.setattr(TRAAttention, "op_normalizes", lambda self, cache: False)
    layer = loss_and_grads()
    torch.testing.assert_close(fused[0], layer[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(fused[1], layer[1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
