"""Each attention kind owns its options: declared in one dataclass, checked by the kind, held by ModelConfig as
the kind's name and its options; every earlier flat config (models, Hugging Face folders, runs) is refused naming
`tra upgrade`, and once converted computes what it did."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM
from tra_attn.layers import (
    ALiBiOptions,
    ASEntmaxOptions,
    CoPEOptions,
    FIREOptions,
    FoXOptions,
    FoXProOptions,
    GatedOptions,
    KERPLEOptions,
    KindOptions,
    NoOptions,
    PaTHFoXOptions,
    PaTHOptions,
    RoPEOptions,
    SoftpickOptions,
    SSMaxOptions,
    StickBreakingOptions,
    T5Options,
    TRAAttention,
    TRAOptions,
    WallOptions,
)
from tra_attn.models.config import VERSION as MODEL_VERSION
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import load_train_state
from tra_attn.training.config import VERSION as TRAIN_VERSION
from tra_attn.upgrade.configs import FLAT_OPTIONS, upgrade_train_config
from tra_attn.upgrade.files import upgrade
from tra_attn.utils.dataclass_io import OldVersion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "v0_2_models"


def test_every_kind_declares_its_options_and_only_those():
    declared = {name: kind.options for name, kind in ATTENTION_KINDS.items()}
    assert declared == {
        "tra": TRAOptions,
        "nope": NoOptions,
        "rope": RoPEOptions,
        "alibi": ALiBiOptions,
        "fox": FoXOptions,
        "fox_pro": FoXProOptions,
        "cope": CoPEOptions,
        "t5": T5Options,
        "fire": FIREOptions,
        "kerple": KERPLEOptions,
        "stickbreaking": StickBreakingOptions,
        "ssmax": SSMaxOptions,
        "asentmax": ASEntmaxOptions,
        "softpick": SoftpickOptions,
        "gated": GatedOptions,
        "selective": NoOptions,
        "path": PaTHOptions,
        "path_fox": PaTHFoXOptions,
        "wall": WallOptions,
    }
    assert TRAOptions.names()[-2:] == ["gate", "distance"]  # the ablations are options of TRA, not kinds
    assert all(issubclass(options, KindOptions) for options in declared.values())
    # ModelConfig names no option of any kind: only the kind and its options.
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    assert not fields & {name for options in declared.values() for name in options.names()}
    assert not fields & set(FLAT_OPTIONS)  # 0.2's flat option fields


def test_the_config_holds_the_kinds_options_filled_with_defaults_and_round_trips():
    config = ModelConfig(attention="tra", attention_options={"local_window": 4, "keep_surrogate": 1})
    assert config.attention_options == TRAOptions(local_window=4, keep_surrogate=1.0)
    assert isinstance(config.attention_options.keep_surrogate, float)  # an int for a float option: a float
    saved = config.to_dict()
    assert saved["version"] == MODEL_VERSION and saved["attention_options"]["local_window"] == 4
    assert saved["attention_options"] == dataclasses.asdict(TRAOptions(local_window=4, keep_surrogate=1.0))
    assert ModelConfig.from_dict(json.loads(config.to_json())) == config
    assert ModelConfig(attention="rope").attention_options == RoPEOptions(base=10000.0)
    assert ModelConfig(attention="nope").to_dict()["attention_options"] == {}
    other = dataclasses.replace(config, attention="fox", attention_options={"gate_bias_init": 2})
    assert other.attention_options == FoXOptions(gate_bias_init=2.0)


TRA_ABLATIONS = [("tra", {"gate": "key"}), ("tra", {"distance": False}), ("tra", {"threshold": float("-inf")})]


@pytest.mark.parametrize("kind,ablation", [(kind, {}) for kind in ATTENTION_KINDS] + TRA_ABLATIONS)
def test_a_layer_built_from_plain_arguments_is_the_layer_of_the_model(kind, ablation):
    """A user drops a layer into a model of their own: built from sizes and options, it computes what the
    library model's layer computes with the same weights."""
    options = {"cope": {"max_pos": 9}, "rope": {"base": 100.0}, "fox": {"gate_bias_init": 1.0}}.get(kind, {})
    if kind == "tra":
        options = ablation if "threshold" in ablation else {**ablation, "local_window": 2, "dense_heads": 1}
    config = ModelConfig(vocab_size=13, d_model=32, n_layers=1, n_heads=4, attention=kind, attention_options=options)
    model = TransformerLM(config).double()
    layer = ATTENTION_KINDS[kind].cls(d_model=32, n_heads=4, **options).double()
    layer.load_state_dict(model.blocks[0].attn.state_dict())
    assert layer.options == config.attention_options
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    torch.testing.assert_close(layer(x), model.blocks[0].attn(x), atol=0, rtol=0)


def test_a_drop_in_layer_checks_its_sizes_and_initialises_its_gate():
    layer = TRAAttention(d_model=64, n_heads=4, gate_bias_init=3.0)
    assert (layer.gate_proj.bias == 3.0).all() and layer(torch.randn(1, 5, 64)).shape == (1, 5, 64)
    with pytest.raises(ValueError, match=r"d_model = 30; expected a multiple of n_heads = 4"):
        TRAAttention(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match=r"attention_dropout = 1\.0; expected a probability in \[0, 1\)"):
        TRAAttention(d_model=32, n_heads=4, attention_dropout=1.0)


def copy_of(name: str, tmp_path: Path) -> Path:
    """A copy of the fixture folder ``name`` (under tests/fixtures/v0_2_models, or a sibling fixture)."""
    source = FIXTURES / name if (FIXTURES / name).is_dir() else FIXTURES.parent / name
    return Path(shutil.copytree(source, tmp_path / name))


@pytest.mark.parametrize("name", ["tra", "rope", "cope", "rope_hf"])
def test_models_saved_by_0_2_load_and_compute_the_logits_they_did(name, tmp_path):
    """Fixtures written by tra_attn 0.2 (commit f4e8d9f): TRA with a local window, the keep surrogate, a gate
    bias and a threshold; RoPE with a frequency base (and 0.2's unused cope_max_pos and tra_threshold); CoPE
    with a position table size (and an unused gate bias); the RoPE model also in Hugging Face's form. Loading one
    is refused naming `tra upgrade` and the file; converted, it loads and computes the logits 0.2 computed."""
    expected = load_file(FIXTURES / "logits.safetensors")
    folder = copy_of(name, tmp_path)
    config = folder / "config.json"
    if name.endswith("_hf"):  # Hugging Face's config holds the model fields without a version
        refusal = rf"{config}: a Hugging Face config written by an earlier version of tra \(the flat option fields "
        refusal += rf"\[.*'rope_base'.*\]\); convert its folder with `tra upgrade {folder}`"
    else:
        refusal = rf"{config}: ModelConfig version 6, written by an earlier version of tra; expected version "
        refusal += rf"{MODEL_VERSION}: "
        refusal += rf"convert it with `tra upgrade {config}`"
    with pytest.raises(OldVersion, match=refusal):
        TransformerLM.from_pretrained(folder)
    assert upgrade(folder) == [config]
    model = TransformerLM.from_pretrained(folder).eval()
    options = model.config.attention_options
    assert {
        "tra": TRAOptions(threshold=0.1, local_window=3, keep_surrogate=1.0, gate_bias_init=2.0),
        "rope": RoPEOptions(base=500.0),
        "rope_hf": RoPEOptions(base=500.0),
        "cope": CoPEOptions(max_pos=12),
    }[name] == options
    with torch.no_grad():
        logits = model(expected["ids"])
    # The same computation; only the order of fp32 sums may differ (a faster op, another machine's kernels).
    torch.testing.assert_close(logits, expected[name.removesuffix("_hf")], atol=2e-5, rtol=2e-5)


def test_a_hugging_face_folder_written_by_0_2_loads_through_the_auto_classes(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    import tra_attn  # noqa: F401  (registers model_type "tra")

    expected = load_file(FIXTURES / "logits.safetensors")
    folder = copy_of("rope_hf", tmp_path)
    refusal = r"a Hugging Face config written by an earlier version of tra \(the flat option fields \["
    for load in (AutoConfig.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(OldVersion, match=refusal + r".*\]\); convert its folder with `tra upgrade FOLDER`"):
            load(folder)
    assert upgrade(folder) == [folder / "config.json"]
    wrapper = AutoModelForCausalLM.from_pretrained(folder).eval()
    every_option = {"base": 500.0, "random_positions": 0, "random_positions_at_eval": False, "random_per_layer": True}
    assert wrapper.config.attention_options == every_option
    assert not hasattr(wrapper.config, "rope_base")  # folded into the options, not kept beside them
    with torch.no_grad():
        torch.testing.assert_close(wrapper(expected["ids"]).logits, expected["rope"], atol=2e-5, rtol=2e-5)
    wrapper.save_pretrained(tmp_path / "again")
    written = json.loads((tmp_path / "again" / "config.json").read_text())
    assert written["attention_options"] == every_option and "rope_base" not in written


def test_a_run_written_by_0_2_resumes_as_the_run_that_never_stopped(tmp_path):
    """The fixture is the step-1 checkpoint of a 0.2 run (commit f4e8d9f: `tra train --task flipflop --length 16
    --batch-size 4 --steps 2 --checkpoint-every 1 --eval-every 0 --d-model 16 --n-heads 2 --n-layers 1
    --tra-local-window 2 --gate-bias-init 1.0`), whose configs hold TRA's options as flat fields. Refused until
    `tra upgrade` converts its configs to the current versions; resumed then, it reaches the weights a run started
    here reaches. The weights agree to fp32 summation-order tolerance, not bit for bit: step 1 was computed by 0.2's
    op, whose forward sums in another order than today's (a resume within one version is bit-identical: test_train)."""
    run = copy_of("v0_2_run", tmp_path)
    checkpoint = run / "checkpoints" / "step_0000001"
    saved = json.loads((run / "train_config.json").read_text())
    assert saved["version"] == 5 and saved["model"]["tra_local_window"] == 2  # flat options, as 0.2 wrote them
    with pytest.raises(OldVersion, match=r"TrainConfig version 5, written by an earlier version of tra; expected "
                       r"version 7: convert it with `tra upgrade PATH`"):  # fmt: skip
        TrainConfig.from_dict(saved)
    config = TrainConfig.from_dict(upgrade_train_config(saved))
    assert config.model.attention_options == TRAOptions(local_window=2, gate_bias_init=1.0)
    # (resume reports it inside "the latest checkpoint cannot be loaded": see test_upgrade's resume test)
    with pytest.raises(ValueError, match=rf"{checkpoint}/train_config\.json: TrainConfig version 5, .*`tra upgrade"):
        train(config, run, resume=True, progress=False)
    with pytest.raises(OldVersion, match=rf"`tra upgrade {checkpoint}/train_config\.json`"):
        load_train_state(checkpoint)
    converted = [run / "train_config.json", checkpoint / "config.json", checkpoint / "train_config.json"]
    assert sorted(upgrade(run)) == sorted(converted)
    rewritten = json.loads((run / "train_config.json").read_text())
    assert rewritten["version"] == TRAIN_VERSION and rewritten["model"]["attention_options"]["local_window"] == 2
    assert TrainConfig.from_dict(rewritten) == config
    resumed = train(config, run, resume=True, progress=False)
    straight = train(config, tmp_path / "straight", progress=False)
    got, want = (TransformerLM.from_pretrained(path).state_dict() for path in (resumed, straight))
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
