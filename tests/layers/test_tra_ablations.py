"""The TRA ablations are option values of the one TRA layer (layers/tra.py): ``gate = "key"`` (formerly the kind
``tra_keygate``), ``threshold = -inf`` (``tra_nothreshold``) and ``distance = False`` (``tra_nodistance``).

Each computes what its kind computed: against a materialised reference of its definition, and against models saved
by the kinds themselves (tests/fixtures/v0_3_ablations, written by commit cf952f5, the last with the kinds: ModelConfig
version 7; the same weights give the same logits, packed and cached logits, training logits with logit dropout and
parameter gradients). Options that mean nothing together are refused by both names, and every saved form of a
config naming a former kind (a model folder, a Hugging Face folder, a 0.2 flat config, a run's train_config.json
given to ``tra train --config``) is refused naming ``tra upgrade``, which converts it to TRA with the ablation's
option."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.conftest import TRA_ABLATIONS
from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import TRAAttention, TRAOptions, attention_kind
from tra_attn.layers.norms import rms_normalize
from tra_attn.layers.tra import THRESHOLD_OPTIONS
from tra_attn.metrics.accuracy import eval_batch_size
from tra_attn.models.config import LEGACY_TRA_KINDS, VERSION
from tra_attn.training import TrainConfig
from tra_attn.upgrade.configs import BLOCK_PARTS_10 as NO_PARTS
from tra_attn.upgrade.configs import upgrade_model_config, upgrade_train_config
from tra_attn.upgrade.files import upgrade
from tra_attn.utils.dataclass_io import OldVersion

FIXTURES = Path(__file__).parents[1] / "fixtures" / "v0_3_ablations"
# The options the fixtures were saved with (besides the ablation itself).
SAVED_OPTIONS = {
    "tra_keygate": {"threshold": 0.1, "local_window": 2, "dense_heads": 1, "dense_window": 5, "gate_bias_init": 1.0},
    "tra_nothreshold": {"impl": "chunked", "learned_temperature": True, "gate_bias_init": 2.0},
    "tra_nodistance": {"threshold": 0.05, "local_window": 3, "dense_heads": 1, "keep_surrogate": 0.5},
}


def layer_gate(layer: TRAAttention, x: torch.Tensor) -> torch.Tensor:
    """(B, H, S) logsigmoid of the gate projection, computed in fp32 as the layer does (then in x's dtype)."""
    return F.logsigmoid(layer.gate_proj(x).float()).transpose(1, 2).to(x.dtype)


def reference(layer: TRAAttention, x: torch.Tensor, ablation: str) -> torch.Tensor:
    """The layer's output on x (B, S, d_model), one document per row, materialised from each ablation's definition:
    keygate: logits s_ij + sum over kept l in [j, i] of g_l; nothreshold: every causal key kept, s_ij + g_i (i - j + 1);
    nodistance: the keys with s_ij > threshold, logits s_ij. A row with no kept key outputs 0."""
    o = layer.options
    q, k, v = (layer.split_heads(proj(x)) for proj in (layer.q_proj, layer.k_proj, layer.v_proj))
    q, k = rms_normalize(q, layer.norm_eps), rms_normalize(k, layer.norm_eps)
    if layer.log_temperature is not None:
        q = q * layer.log_temperature.exp()[:, None, None]
    scores = q @ k.transpose(-1, -2) / math.sqrt(layer.head_dim)
    s = x.shape[1]
    i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
    causal = j <= i
    if ablation == "tra_nothreshold":
        keep = causal.expand_as(scores)
        gate = layer_gate(layer, x)
        logits = scores + gate[..., None] * (i - j + 1)
    else:
        keep = causal & (scores > o.threshold)
        logits = scores
        if ablation == "tra_keygate":
            gate = layer_gate(layer, x)  # (B, H, S): the gate of every key l
            between = (j >= i).to(scores.dtype)  # between[j, l] = 1 iff l >= j (indices reused: rows j, columns l)
            logits = scores + torch.einsum("bhil,jl->bhij", keep * gate[:, :, None, :], between)
    weights = torch.where(keep, logits, -math.inf).softmax(-1).nan_to_num(0.0)
    out = (weights @ v).transpose(1, 2).reshape(x.shape)
    return layer.o_proj(out)


@pytest.mark.parametrize("ablation", TRA_ABLATIONS)
def test_each_ablation_computes_its_definition(ablation):
    torch.manual_seed(0)
    options = {**TRA_ABLATIONS[ablation], **({"threshold": 0.1} if ablation != "tra_nothreshold" else {})}
    layer = TRAAttention(32, 4, gate_bias_init=1.0 if ablation != "tra_nodistance" else 0.0, **options).double()
    x = torch.randn(2, 13, 32, dtype=torch.float64)
    torch.testing.assert_close(layer(x), reference(layer, x, ablation), atol=1e-12, rtol=1e-12)
    plain = TRAAttention(32, 4, threshold=0.1).double()  # TRA itself, with the same weights: another function
    plain.load_state_dict(layer.state_dict(), strict=False)
    assert not torch.allclose(layer(x), plain(x))


def test_the_ablations_are_tra_options_with_their_parameters():
    keys = {name: set(TRAAttention(32, 4, **options).state_dict()) for name, options in TRA_ABLATIONS.items()}
    plain = set(TRAAttention(32, 4).state_dict())
    assert keys["tra_keygate"] == keys["tra_nothreshold"] == plain and "gate_proj.weight" in plain
    assert keys["tra_nodistance"] == plain - {"gate_proj.weight", "gate_proj.bias"}  # no gate without a distance
    assert not hasattr(TRAAttention(32, 4, distance=False), "gate_proj")
    assert TRAOptions(gate="key").gate == "key" and TRAOptions().gate == "query" and TRAOptions().distance is True
    # Only the key gate materialises (B, H, S, S) scores: evaluation batches are sized for it.
    tra = attention_kind("tra")
    assert [tra.materializes(TRAOptions(**o)) for o in TRA_ABLATIONS.values()] == [True, False, False]
    sized = {name: eval_batch_size(ModelConfig(attention_options=o), 512) for name, o in TRA_ABLATIONS.items()}
    assert (
        sized["tra_keygate"]
        < sized["tra_nothreshold"]
        == sized["tra_nodistance"]
        == eval_batch_size(ModelConfig(), 512)
    )


@pytest.mark.parametrize("name", THRESHOLD_OPTIONS)
def test_without_a_threshold_the_threshold_options_are_refused_by_both_names(name):
    default = next(f.default for f in dataclasses.fields(TRAOptions) if f.name == name)
    value = {int: 2, float: 0.25}[type(default)]
    options = {"threshold": -math.inf, name: value, **({"dense_heads": 1} if name == "dense_window" else {})}
    pattern = rf"TRAOptions\.{name} = {value!r} with TRAOptions\.threshold = -inf; expected {name} = {default!r} \("
    if name == "dense_window":  # dense_heads (also refused) comes first
        pattern = r"TRAOptions\.dense_heads = 1 with TRAOptions\.threshold = -inf; expected dense_heads = 0"
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(attention_options=options)
    with pytest.raises(ValueError, match=pattern):
        TRAAttention(32, 4, **options)
    assert TRAOptions(threshold=-math.inf, learned_temperature=True, gate_bias_init=2.0, impl="chunked")  # the rest


@pytest.mark.parametrize(
    "options,pattern",
    [
        ({"gate": "key", "impl": "naive"}, r"impl = 'naive' with TRAOptions\.gate = 'key'; expected impl = 'auto'"),
        ({"gate": "key", "keep_surrogate": 0.5}, r"keep_surrogate = 0\.5 with TRAOptions\.gate = 'key'; expected"),
        (
            {"distance": False, "gate": "key"},
            r"gate = 'key' with TRAOptions\.distance = False; expected gate = 'query'",
        ),
        ({"distance": False, "gate_bias_init": 3.0}, r"gate_bias_init = 3\.0 with TRAOptions\.distance = False"),
    ],
)
def test_options_that_exclude_each_other_are_refused_by_both_names(options, pattern):
    with pytest.raises(ValueError, match=rf"TRAOptions\.{pattern}"):
        TRAOptions(**options)


def test_the_ablations_combine_where_they_mean_something():
    torch.manual_seed(1)
    x = torch.randn(1, 9, 32, dtype=torch.float64)
    # Key gate without a threshold: every causal key kept, each adds its own gate (FoX with TRA's norms).
    layer = TRAAttention(32, 4, gate="key", threshold=-math.inf).double()
    assert torch.isfinite(layer(x)).all()
    # No distance and no threshold: plain causal softmax attention over RMS-normalised q and k.
    free = TRAAttention(32, 4, distance=False, threshold=-math.inf).double()
    q, k, v = (free.split_heads(p(x)) for p in (free.q_proj, free.k_proj, free.v_proj))
    q, k = rms_normalize(q, free.norm_eps), rms_normalize(k, free.norm_eps)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(x.shape)
    torch.testing.assert_close(free(x), free.o_proj(out), atol=1e-12, rtol=1e-12)


def saved(kind: str) -> dict:
    return json.loads((FIXTURES / kind / "config.json").read_text())


def converted(kind: str, tmp_path: Path) -> Path:
    """A copy of the fixture folder of ``kind``, refused as it is (naming `tra upgrade` and its config.json), then
    converted by ``upgrade``."""
    folder = Path(shutil.copytree(FIXTURES / kind, tmp_path / kind))
    config = folder / "config.json"
    if kind.endswith("_hf"):  # Hugging Face's config holds the model fields without a version
        refusal = rf"{config}: a Hugging Face config written by an earlier version of tra \(the former kind "
        refusal += rf"'{kind.removesuffix('_hf')}'\); convert its folder with `tra upgrade {folder}`"
    else:
        refusal = (
            rf"{config}: ModelConfig version 7, written by an earlier version of tra; expected version {VERSION}: "
        )
        refusal += rf"convert it with `tra upgrade {config}`"
    with pytest.raises(OldVersion, match=refusal):
        TransformerLM.from_pretrained(folder)
    assert upgrade(folder) == [config]
    return folder


@pytest.mark.parametrize("kind", LEGACY_TRA_KINDS)
def test_a_model_saved_with_a_former_kind_loads_as_tra_and_computes_what_it_did(kind, tmp_path):
    """The fixture is ModelConfig version 7 naming the kind: refused until `tra upgrade` converts it, it then loads
    as attention 'tra' with the ablation's option and its other options kept, the same parameter names, and the same
    outputs as the kind's layer computed."""
    assert saved(kind)["version"] == 7 and saved(kind)["attention"] == kind
    expected = load_file(FIXTURES / "outputs.safetensors")
    model = TransformerLM.from_pretrained(converted(kind, tmp_path))
    config = model.config
    assert config.attention == "tra"
    assert config.attention_options == TRAOptions(**TRA_ABLATIONS[kind], **SAVED_OPTIONS[kind])
    assert set(model.state_dict()) == set(load_file(FIXTURES / kind / "model.safetensors"))
    ids, seg = expected["ids"], expected["segment_ids"]
    tol = dict(atol=1e-6, rtol=1e-6)  # the same computation; another machine may sum in another order
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), expected[f"{kind}/logits"], **tol)
        torch.testing.assert_close(model(ids, segment_ids=seg), expected[f"{kind}/packed"], **tol)
        cache = model.new_cache()
        cached = torch.cat([model(ids[:, :11], cache=cache), model(ids[:, 11:], cache=cache)], 1)
        torch.testing.assert_close(cached, expected[f"{kind}/cached"], **tol)
    model.train()  # logit dropout 0.1 (the key gate's from torch's generator, the op's from its hash) and the surrogate
    torch.manual_seed(5)
    train_logits = model(ids)
    torch.testing.assert_close(train_logits, expected[f"{kind}/train"], **tol)
    (train_logits * expected["weight"]).sum().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[f"{kind}/grad/{name}"], atol=1e-5, rtol=1e-5, msg=name)
    again = ModelConfig.from_dict(json.loads(config.to_json()))
    assert again == config and config.to_dict()["version"] == VERSION


def test_a_hugging_face_folder_of_a_former_kind_loads_both_ways(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    import tra_attn  # noqa: F401  (registers model_type "tra")

    expected = load_file(FIXTURES / "outputs.safetensors")
    assert json.loads((FIXTURES / "tra_keygate_hf" / "config.json").read_text())["attention"] == "tra_keygate"
    refusal = r"the Hugging Face config: a Hugging Face config written by an earlier version of tra \(the former "
    refusal += r"kind 'tra_keygate'\); convert its folder with `tra upgrade FOLDER`"
    for load in (AutoConfig.from_pretrained, AutoModelForCausalLM.from_pretrained):
        with pytest.raises(OldVersion, match=refusal):
            load(FIXTURES / "tra_keygate_hf")
    folder = converted("tra_keygate_hf", tmp_path)
    assert AutoConfig.from_pretrained(folder).attention == "tra"
    assert AutoConfig.from_pretrained(folder).attention_options["gate"] == "key"
    wrapper = AutoModelForCausalLM.from_pretrained(folder).eval()
    native = TransformerLM.from_pretrained(folder).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            wrapper(expected["ids"]).logits, expected["tra_keygate/logits"], atol=1e-6, rtol=1e-6
        )
        torch.testing.assert_close(native(expected["ids"]), expected["tra_keygate/logits"], atol=1e-6, rtol=1e-6)
    wrapper.save_pretrained(tmp_path / "again")
    written = json.loads((tmp_path / "again" / "config.json").read_text())
    assert written["attention"] == "tra" and written["attention_options"]["gate"] == "key"


def test_older_forms_of_a_former_kind_convert_too():
    # 0.2 (version 6 and earlier) kept the options flat; a kind dropped those it did not declare (impl for the key
    # gate, the threshold for tra_nothreshold), and its conversion still does for the former kinds.
    flat = {k: v for k, v in ModelConfig().to_dict().items() if k not in ("version", "attention_options")}
    flat |= {"tra_threshold": 0.0, "tra_impl": "chunked", "tra_local_window": 2, "gate_bias_init": 1.0}
    # 0.2 wrote every flat field:
    flat |= {"tra_learned_temperature": False, "tra_dense_heads": 0, "tra_dense_window": 0, "tra_threshold_warmup": 0,
             "tra_keep_surrogate": 0.0, "rope_base": 10000.0, "cope_max_pos": 64}  # fmt: skip

    def current(data: dict) -> ModelConfig:
        with pytest.raises(OldVersion, match=rf"ModelConfig version {data['version']}, written by an earlier versi"):
            ModelConfig.from_dict(data)
        return ModelConfig.from_dict(upgrade_model_config(data))

    keygate = current({**flat, "version": 6, "attention": "tra_keygate"})
    assert keygate.attention_options == TRAOptions(gate="key", local_window=2, gate_bias_init=1.0)
    nothreshold = current({**flat, "version": 6, "attention": "tra_nothreshold", "tra_local_window": 0})
    assert nothreshold.attention_options == TRAOptions(threshold=-math.inf, impl="chunked", gate_bias_init=1.0)
    nodistance = current({**flat, "version": 6, "attention": "tra_nodistance"})
    assert nodistance.attention_options == TRAOptions(distance=False, impl="chunked", local_window=2)
    # A run's train_config.json (TrainConfig version 6) nests its version-7 model config.
    run = {**TrainConfig(task="flipflop", model=ModelConfig(vocab_size=6), length=16).to_dict(), "version": 6}
    run["model"] = {**saved("tra_nodistance"), "vocab_size": 6}
    with pytest.raises(OldVersion, match=r"TrainConfig version 6, written by an earlier version of tra"):
        TrainConfig.from_dict(run)
    with pytest.raises(OldVersion, match=r"ModelConfig version 7, written by an earlier version of tra"):
        TrainConfig.from_dict({**run, "version": 7})  # a current run, its model not: refused all the same
    upgraded = upgrade_train_config(run)
    assert upgraded["model"]["version"] == VERSION and upgraded["model"]["attention"] == "tra"
    assert TrainConfig.from_dict(upgraded).model.attention_options == TRAOptions(
        distance=False, **SAVED_OPTIONS["tra_nodistance"]
    )
    # The conversion itself: other attention kinds pass through (the options they gained later at their defaults),
    # a kind without options gets its ablation's.
    rope = upgrade_model_config({"version": 7, "attention": "rope", "attention_options": {"base": 5.0}})
    later = {"random_positions": 0, "random_positions_at_eval": False, "random_per_layer": True}
    assert rope == {"version": VERSION, "attention": "rope", "attention_options": {"base": 5.0, **later}, **NO_PARTS}
    keygate = upgrade_model_config({"version": 7, "attention": "tra_keygate"})["attention_options"]
    assert keygate == TRAOptions(gate="key").to_dict()
    # A current config names current kinds.
    with pytest.raises(ValueError, match=r"ModelConfig\.attention = 'tra_nodistance'; expected 'tra' with the option"):
        ModelConfig.from_dict({**saved("tra_nodistance"), **NO_PARTS, "version": VERSION})


def test_a_former_kind_with_options_that_are_not_a_dict_still_converts_to_tra():
    odd = upgrade_model_config({"version": 7, "attention": "tra_keygate", "attention_options": [1]})
    assert odd == {"version": VERSION, "attention": "tra", "attention_options": [1], **NO_PARTS}


def test_tra_train_config_of_a_former_kind_takes_the_current_flags(tmp_path):
    from tra_attn.cli import build_parser
    from tra_attn.cli.train import config_from_args

    run = {**TrainConfig(task="flipflop", model=ModelConfig(vocab_size=6), length=16).to_dict(), "version": 6}
    run["model"] = {**saved("tra_keygate"), "vocab_size": 6}
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(run))
    args = build_parser().parse_args(
        ["train", "--config", str(path), "--out", str(tmp_path / "r"), "--tra-local-window", "4"]
    )
    with pytest.raises(OldVersion, match=rf"--config {path}: TrainConfig version 6, written by an earlier .*`tra up"):
        config_from_args(args)
    assert upgrade(path) == [path]
    options = config_from_args(args).model.attention_options
    assert options == TRAOptions(gate="key", **{**SAVED_OPTIONS["tra_keygate"], "local_window": 4})
    assert TransformerLM.from_pretrained(converted("tra_keygate", tmp_path)).config.attention_options.gate == "key"
