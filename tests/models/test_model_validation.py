"""The model API under bad input: configs, forward, labels, generation, caches, the registry, saved models.

Every refusal is a ValueError (or TypeError for a wrong kind of object) whose message names the
argument, shows the value and says what was expected."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from tra_attn import ATTENTION_KINDS, AttentionKind, ModelConfig, TransformerLM, register_attention
from tra_attn.layers import check_model_config
from tra_attn.layers.cache import LayerCache
from tra_attn.models.config import VERSION
from tra_attn.training import TrainConfig
from tra_attn.upgrade.configs import upgrade_model_config
from tra_attn.utils.dataclass_io import OldVersion

KINDS = list(ATTENTION_KINDS)


def small(kind="tra", **overrides):
    return TransformerLM(
        ModelConfig(**{"vocab_size": 11, "d_model": 16, "n_layers": 1, "n_heads": 2, "attention": kind, **overrides})
    )


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"vocab_size": 0}, r"ModelConfig\.vocab_size = 0; expected a positive integer"),
        ({"vocab_size": -3}, r"ModelConfig\.vocab_size = -3; expected a positive integer"),
        ({"vocab_size": True}, r"ModelConfig\.vocab_size = True; expected a positive integer"),
        ({"vocab_size": "6"}, r"ModelConfig\.vocab_size = '6'; expected a positive integer"),
        ({"vocab_size": 2.5}, r"vocab_size = 2\.5; expected a positive integer"),
        ({"d_model": 0}, r"ModelConfig\.d_model = 0; expected a positive integer"),
        ({"d_model": 16.0}, r"ModelConfig\.d_model = 16\.0; expected a positive integer"),
        ({"n_layers": 0}, r"ModelConfig\.n_layers = 0; expected a positive integer"),
        ({"n_heads": -1}, r"ModelConfig\.n_heads = -1; expected a positive integer"),
        ({"n_heads": 0}, r"ModelConfig\.n_heads = 0; expected a positive integer"),
        ({"d_model": 18, "n_heads": 4}, r"ModelConfig\.d_model = 18; expected a multiple of n_heads = 4"),
        ({"d_model": 30, "n_heads": 4}, r"ModelConfig\.d_model = 30; expected a multiple of n_heads = 4"),
        ({"block_style": "post"}, r"ModelConfig\.block_style = 'post'; expected 'prenorm' or 'paper'"),
        ({"block_style": "postnorm"}, r"block_style = 'postnorm'; expected 'prenorm' or 'paper'"),
        ({"dropout": 1.0}, r"ModelConfig\.dropout = 1\.0; expected a probability in \[0, 1\)"),
        ({"dropout": 1.5}, r"dropout = 1\.5; expected a probability"),
        ({"dropout": -0.1}, r"ModelConfig\.dropout = -0\.1; expected a probability"),
        ({"dropout": math.nan}, r"ModelConfig\.dropout = nan; expected a probability"),
        ({"mlp_ratio": 0.0}, r"ModelConfig\.mlp_ratio = 0\.0; expected a finite positive number"),
        ({"mlp_ratio": 0.005}, r"ModelConfig\.mlp_ratio = 0\.005; expected a ratio giving an MLP at least 1 wide"),
        ({"mlp_ratio": math.inf}, r"ModelConfig\.mlp_ratio = inf; expected a finite positive number"),
        ({"norm_eps": 0.0}, r"ModelConfig\.norm_eps = 0\.0; expected a finite positive number"),
        ({"norm_eps": math.nan}, r"ModelConfig\.norm_eps = nan; expected a finite positive number"),
        ({"init_std": -0.02}, r"ModelConfig\.init_std = -0\.02; expected a finite positive number"),
        ({"attention": "TRA"}, r"ModelConfig\.attention = 'TRA'; expected one of \['tra'"),
        ({"attention": None}, r"ModelConfig\.attention = None; expected one of"),
        ({"attention": ["tra"]}, r"ModelConfig\.attention = \['tra'\]; expected one of"),
        ({"attention": "flash"}, r"ModelConfig\.attention = 'flash'; expected one of \['tra', 'nope'"),
        (
            {"attention": "tra_keygate"},
            r"ModelConfig\.attention = 'tra_keygate'; expected 'tra' with the option gate = 'key' \(the TRA ablations",
        ),
        ({"attention": "tra_nothreshold"}, r"'tra_nothreshold'; expected 'tra' with the option threshold = -inf"),
        ({"attention": "tra_nodistance"}, r"'tra_nodistance'; expected 'tra' with the option distance = False"),
        ({"attention_options": {"impl": "fast"}}, r"TRAOptions\.impl = 'fast'"),
        ({"attention": "rope", "d_model": 12, "n_heads": 4}, r"even head dimension"),
    ],
)
def test_bad_model_config(kwargs, pattern):
    """Refused by ModelConfig itself: its fields, and the registry's checks (the attention kind exists, the
    options are the kind's and it can run them)."""
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(**kwargs)


TRA = "threshold, impl, learned_temperature, dense_heads, local_window, dense_window, threshold_warmup"


@pytest.mark.parametrize(
    "kind,options,pattern",
    [
        ("cope", {"max_pos": 0}, r"CoPEOptions\.max_pos = 0; expected a positive integer"),
        ("rope", {"base": 0}, r"RoPEOptions\.base = 0; expected a finite positive number"),
        ("rope", {"base": True}, r"RoPEOptions\.base = True; expected a finite positive number"),
        ("fox", {"gate_bias_init": math.nan}, r"FoXOptions\.gate_bias_init = nan; expected a finite number"),
        ("tra", {"gate_bias_init": -math.inf}, r"TRAOptions\.gate_bias_init = -inf; expected a finite number"),
        ("tra", {"gate_bias_init": "0"}, r"TRAOptions\.gate_bias_init = '0'; expected a finite number"),
        ("tra", {"threshold": math.nan}, r"TRAOptions\.threshold = nan; expected a number"),
        ("tra", {"threshold": "0"}, r"TRAOptions\.threshold = '0'; expected a number"),
        ("tra", {"threshold_warmup": -1}, r"TRAOptions\.threshold_warmup = -1; expected a non-negative integer"),
        ("tra", {"threshold_warmup": 2.0}, r"TRAOptions\.threshold_warmup = 2\.0; expected a non-negative integer"),
        ("tra", {"local_window": -1}, r"TRAOptions\.local_window = -1; expected a non-negative integer"),
        ("tra", {"local_window": True}, r"TRAOptions\.local_window = True; expected a non-negative integer"),
        ("tra", {"dense_window": 1.5}, r"TRAOptions\.dense_window = 1\.5; expected a non-negative integer"),
        ("tra", {"dense_window": 16}, r"dense_window = 16; expected 0 when dense_heads = 0 \(the window applies to"),
        ("tra", {"dense_heads": 5}, r"TRAOptions\.dense_heads = 5; expected at most n_heads = 4"),
        ("tra", {"keep_surrogate": -1.0}, r"TRAOptions\.keep_surrogate = -1\.0; expected a finite number >= 0"),
        ("tra", {"impl": "cuda"}, r"TRAOptions\.impl = 'cuda'; expected one of \('auto', 'naive'"),
        (
            "tra",
            {"local_windw": 2},
            rf"\['local_windw'\] are not options of attention = 'tra'; its options: {TRA}",
        ),
        ("tra", [("local_window", 2)], r"attention_options = \[\('local_window', 2\)\]; expected a dict of the optio"),
        ("tra", {"gate": "sideways"}, r"TRAOptions\.gate = 'sideways'; expected one of \('query', 'key'\)"),
        ("tra", {"distance": 0}, r"TRAOptions\.distance = 0; expected true or false"),
        (
            "tra",
            {"gate": "key", "impl": "chunked"},
            r"TRAOptions\.impl = 'chunked' with TRAOptions\.gate = 'key'; expected impl = 'auto' \(the key-gate op",
        ),
        (
            "tra",
            {"gate": "key", "keep_surrogate": 1.0},
            r"TRAOptions\.keep_surrogate = 1\.0 with TRAOptions\.gate = 'key'; expected keep_surrogate = 0\.0",
        ),
        ("fox", {"dense_heads": 1}, r"\['dense_heads'\] are not options of attention = 'fox'; its options: gate_bias"),
        (
            "rope",
            {"threshold_warmup": 3},
            r"\['threshold_warmup'\] are not options of attention = 'rope'; its options: base",
        ),
        ("nope", {"dense_heads": 1}, r"\['dense_heads'\] are not options of attention = 'nope'; its options: none"),
        (
            "tra",
            {"threshold": -math.inf, "local_window": 2},
            r"TRAOptions\.local_window = 2 with TRAOptions\.threshold = -inf; expected local_window = 0",
        ),
        (
            "tra",
            {"distance": False, "gate_bias_init": 1.0},
            r"TRAOptions\.gate_bias_init = 1\.0 with TRAOptions\.distance = False; expected gate_bias_init = 0\.0",
        ),
        (
            "tra",
            {"distance": False, "gate": "key"},
            r"TRAOptions\.gate = 'key' with TRAOptions\.distance = False; expected gate = 'query'",
        ),
    ],
)
def test_each_kind_declares_and_checks_its_options(kind, options, pattern):
    """A kind's options are checked by the kind when the config is built: an unknown name lists the kind's
    options, a bad value names the option (ModelConfig, and the layer built from plain arguments alike)."""
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(attention=kind, n_heads=4, attention_options=options)
    if isinstance(options, dict):
        layer = ATTENTION_KINDS[kind].cls
        with pytest.raises(ValueError, match=re.sub(r"attention = '\w*'?", layer.__name__, pattern)):
            layer(16, 4, **options)


def test_a_rope_head_dimension_must_be_even():
    with pytest.raises(ValueError, match=r"d_model = 6; expected an even head dimension d_model / n_heads = 3"):
        ModelConfig(attention="rope", d_model=6, n_heads=2)


def test_a_config_edited_after_it_was_built_is_checked_where_models_and_runs_are_built():
    """ModelConfig checks its kind and options when it is built; a config changed afterwards (a field set by
    hand) is checked again by every model and run built from it."""
    config = ModelConfig(n_heads=4, vocab_size=6)
    config.attention = "rope"  # TRA's options stay: not RoPE's
    pattern = r"ModelConfig\.attention_options = TRAOptions\(.*\); expected RoPEOptions for attention = 'rope'"
    with pytest.raises(ValueError, match=pattern):
        check_model_config(config)
    with pytest.raises(ValueError, match=pattern):
        TransformerLM(config)
    with pytest.raises(ValueError, match=pattern):
        TrainConfig(task="flipflop", model=config)


def test_a_saved_model_of_an_unknown_kind_is_refused_when_loaded(tmp_path):
    small().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "attention": "flash"}))
    with pytest.raises(ValueError, match=r"ModelConfig\.attention = 'flash'; expected one of \['tra'"):
        TransformerLM.from_pretrained(tmp_path)


def test_save_pretrained_onto_a_file_and_weights_that_do_not_fit_the_config(tmp_path):
    model = TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"save_pretrained: .*file is a file; expected a directory"):
        model.save_pretrained(tmp_path / "file")
    model.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "d_model": 32}))
    with pytest.raises(ValueError, match=r"from_pretrained: weights do not match the config"):
        TransformerLM.from_pretrained(tmp_path / "m")
    with pytest.raises(ValueError, match=r"from_pretrained: .*nowhere/config\.json does not exist"):
        TransformerLM.from_pretrained(tmp_path / "nowhere")


@pytest.mark.parametrize(
    "dtype,refused",
    [(torch.int64, True), (torch.int32, True), (torch.bool, True), ("one float64", True), (torch.float64, False),
     (torch.bfloat16, False)],
)  # fmt: skip
def test_from_pretrained_never_casts_stored_integers_or_narrows_wider_floats(tmp_path, dtype, refused):
    """load_state_dict copies with a cast: an integer model.safetensors used to load as float weights. A half
    precision file is read exactly (every bfloat16 is a float32); a float64 file (model.double()) loads as a float64
    model; a float32 model with one float64 tensor is refused."""
    model = TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2))
    model.save_pretrained(tmp_path / "m")
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    if dtype == "one float64":
        dtype, state = torch.float64, {**state, "norm.weight": state["norm.weight"].double()}
    else:
        state = {name: t.to(dtype) for name, t in state.items()}
    save_file(state, str(tmp_path / "m" / "model.safetensors"))
    if refused:
        with pytest.raises(ValueError, match=rf"weights do not match the config: .*model\.safetensors: \S+ is {dtype}"):
            TransformerLM.from_pretrained(tmp_path / "m")
        return
    loaded = TransformerLM.from_pretrained(tmp_path / "m")
    widened = torch.float64 if dtype == torch.float64 else torch.float32
    assert all(torch.equal(loaded.state_dict()[n], t.to(widened)) for n, t in state.items())
    assert all(t.dtype == widened for t in loaded.state_dict().values())


def test_from_pretrained_names_missing_and_unexpected_tensors_before_loading(tmp_path):
    TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path / "m")
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    state["extra"] = state.pop("norm.weight")
    save_file(state, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing: \['norm\.weight'\]; unexpected: \['extra'\]"):
        TransformerLM.from_pretrained(tmp_path / "m")


@pytest.mark.parametrize(
    "data,pattern",
    [
        ({"version": VERSION, "n_embd": 16}, r"ModelConfig: unknown fields \['n_embd'\]; expected a subset of"),
        ([16, 1], r"ModelConfig: got list; expected a JSON object of fields"),
        ("{}", r"ModelConfig: got str; expected a JSON object of fields"),
        ({"version": VERSION + 1}, rf"ModelConfig: version = {VERSION + 1}; expected {VERSION} \(newer files need"),
        ({"version": str(VERSION)}, rf"ModelConfig: version = '{VERSION}'; expected {VERSION}"),
        ({"version": True}, rf"ModelConfig: version = True; expected {VERSION}"),
        ({**ModelConfig().to_dict(), "tokenizer": "byte"}, r"ModelConfig\.tokenizer = 'byte'; expected None or a"),
        ({**ModelConfig().to_dict(), "tokenizer": {"name": "gpt2", "vocab_size": 50257}}, r"at most vocab_size = 256"),
    ],
)
def test_bad_model_config_dicts(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig.from_dict(data)


@pytest.mark.parametrize("version", range(1, VERSION))
def test_an_earlier_version_is_refused_naming_tra_upgrade(version):
    data = {**ModelConfig().to_dict(), "version": version}
    pattern = rf"ModelConfig version {version}, written by an earlier version of tra; expected version {VERSION}: "
    with pytest.raises(OldVersion, match=pattern + r"convert it with `tra upgrade PATH` \(PATH: the file, or the"):
        ModelConfig.from_dict(data)
    with pytest.raises(OldVersion, match=r"`tra upgrade PATH`"):
        ModelConfig.from_dict(data, partial=True)  # partial: no version is the current one, an old one is old
    where = "/some/config.json"
    with pytest.raises(OldVersion, match=rf"^{where}: ModelConfig version {version}, .*`tra upgrade {where}`"):
        ModelConfig.from_dict(data, where=where)


def test_version_1_model_configs_load_without_a_tokenizer():
    v1 = {k: v for k, v in ModelConfig(d_model=32).to_dict().items() if k not in ("version", "tokenizer")}
    with pytest.raises(OldVersion, match=r"ModelConfig version 1, written by an earlier version of tra"):
        ModelConfig.from_dict(v1)  # no version: 0.1's
    assert ModelConfig.from_dict(upgrade_model_config(v1)) == ModelConfig(d_model=32)
    assert ModelConfig.from_dict(v1, partial=True) == ModelConfig(d_model=32)  # a dict written by hand: current
    with pytest.raises(ValueError, match=r"missing fields \['tokenizer'\]"):
        ModelConfig.from_dict({**v1, "version": VERSION})  # a current file must have it


def test_model_config_from_dict_rejects_unknown_and_missing_fields(tmp_path):
    with pytest.raises(ValueError, match=r"unknown fields \['n_embd'\]"):
        ModelConfig.from_dict({"n_embd": 64}, partial=True)
    with pytest.raises(ValueError, match=r"unknown fields \['n_embd'\]"):
        ModelConfig.from_dict({"version": VERSION, "n_embd": 64})
    TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["attention_options"], saved["block_style"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"missing fields \['attention_options', 'block_style'\]"):
        TransformerLM.from_pretrained(tmp_path)
    assert ModelConfig.from_dict({"d_model": 64}, partial=True).d_model == 64


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(0, 5), (2, 0)], ids=["empty-batch", "empty-sequence"])
def test_empty_input_is_a_clear_error_for_every_kind(kind, shape):
    with pytest.raises(ValueError, match=rf"input_ids shape = \({shape[0]}, {shape[1]}\); expected at least one"):
        small(kind)(torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize("kind", KINDS)
def test_generate_from_an_empty_prompt_is_a_clear_error_for_every_kind(kind):
    with pytest.raises(ValueError, match=r"input_ids shape = \(1, 0\); expected at least one sequence"):
        small(kind).generate(torch.zeros((1, 0), dtype=torch.long), max_new_tokens=3)


@pytest.mark.parametrize(
    "ids,pattern",
    [
        ([[1, 2]], r"input_ids shape = list; expected a 2-d \(batch, seq\) tensor"),
        (torch.zeros(2, 3, 4, dtype=torch.long), r"input_ids shape = \(2, 3, 4\); expected a 2-d"),
        (torch.zeros(3, dtype=torch.long), r"input_ids shape = \(3,\); expected a 2-d"),
        (torch.zeros(1, 3), r"input_ids\.dtype = torch\.float32; expected an integer dtype"),
        (torch.zeros(1, 3, dtype=torch.bool), r"input_ids\.dtype = torch\.bool; expected an integer dtype"),
    ],
)
def test_bad_input_ids_in_the_forward(ids, pattern):
    with pytest.raises(ValueError, match=pattern):
        small()(ids)


@pytest.mark.parametrize(
    "ids,pattern",
    [
        (torch.zeros(4, dtype=torch.long), r"input_ids shape = \(4,\); expected a 2-d"),
        (torch.zeros(1, 4), r"input_ids\.dtype = torch\.float32; expected an integer dtype"),
    ],
)
def test_model_rejects_bad_input_ids(ids, pattern):
    """Shape and dtype on every forward; the id range (a host sync) at data boundaries and in generate, as
    test_out_of_range_ids_are_caught_at_the_boundaries checks."""
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=pattern):
        model.check_input_ids(ids)
    with pytest.raises(ValueError, match=pattern):
        model.generate(ids, max_new_tokens=1)
    with pytest.raises(ValueError, match=pattern):
        model(ids)


@pytest.mark.parametrize(
    "ids,pattern",
    [
        (torch.tensor([[0, 11]]), r"token ids span \[0, 11\]; expected ids in \[0, 11\)"),
        (torch.tensor([[-1, 3]]), r"token ids span \[-1, 3\]; expected ids in \[0, 11\)"),
        (torch.tensor([[5, 200]], dtype=torch.uint8), r"token ids span \[5, 200\]; expected ids in \[0, 11\)"),
    ],
)
def test_out_of_range_ids_are_caught_at_the_boundaries(ids, pattern):
    model = small()
    with pytest.raises(ValueError, match=pattern):
        model.check_input_ids(ids)
    with pytest.raises(ValueError, match=pattern):
        model.generate(ids, max_new_tokens=2)


@pytest.mark.parametrize(
    "labels,pattern",
    [
        (torch.zeros(2, 4, dtype=torch.long), r"labels\.shape = \(2, 4\); expected \(2, 5\)"),
        (torch.zeros(5, dtype=torch.long), r"labels\.shape = \(5,\); expected \(2, 5\)"),
        (torch.zeros(2, 5, 1, dtype=torch.long), r"labels\.shape = \(2, 5, 1\); expected \(2, 5\)"),
    ],
)
def test_bad_labels(labels, pattern):
    with pytest.raises(ValueError, match=pattern):
        small()(torch.zeros(2, 5, dtype=torch.long), labels=labels)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"max_new_tokens": -1}, r"generate: max_new_tokens = -1; expected a non-negative integer"),
        ({"max_new_tokens": 2.5}, r"generate: max_new_tokens = 2\.5; expected a non-negative integer"),
        ({"max_new_tokens": True}, r"generate: max_new_tokens = True; expected a non-negative integer"),
        ({"max_new_tokens": 2, "temperature": -1.0}, r"generate: temperature = -1\.0; expected a finite number >= 0"),
        ({"max_new_tokens": 2, "temperature": math.nan}, r"generate: temperature = nan; expected a finite number"),
        ({"max_new_tokens": 2, "temperature": math.inf}, r"generate: temperature = inf; expected a finite number"),
        ({"max_new_tokens": 2, "temperature": "1"}, r"generate: temperature = '1'; expected a finite number"),
        ({"max_new_tokens": 2, "top_k": 0}, r"generate: top_k = 0; expected None or a positive integer"),
        ({"max_new_tokens": 2, "top_k": 2.0}, r"generate: top_k = 2\.0; expected None or a positive integer"),
    ],
)
def test_bad_generation_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        small().generate(torch.zeros(1, 3, dtype=torch.long), **kwargs)


def test_generate_with_zero_new_tokens_returns_the_prompt():
    prompt = torch.tensor([[1, 2, 3]])
    assert torch.equal(small().generate(prompt, max_new_tokens=0), prompt)


def test_a_cache_refuses_extras_it_was_not_built_with():
    cache = LayerCache()
    keys = torch.zeros(1, 2, 3, 4)
    cache.update(keys, keys, log_gate=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match=r"LayerCache\.update: extras \[\]; expected \['log_gate'\]"):
        cache.update(keys, keys)


@pytest.mark.parametrize(
    "kind,error,pattern",
    [
        ("not a kind", TypeError, r"register_attention: kind = 'not a kind'; expected an AttentionKind"),
        (AttentionKind("x", int), TypeError, r"x\.cls = <class 'int'>; expected an Attention subclass"),
        (AttentionKind("nope", type(small().blocks[0].attn)), ValueError, r"'nope' is already registered"),
    ],
)
def test_bad_registrations(kind, error, pattern):
    with pytest.raises(error, match=pattern):
        register_attention(kind)


def test_a_saved_config_that_lost_an_option_is_refused_naming_it_and_the_file(tmp_path):
    """A current config.json whose attention_options lack one would load that option's default: another model."""
    small(attention_options={"threshold": 0.5}).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["attention_options"]["threshold"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    missing = r"config\.json: ModelConfig\.attention_options: missing options \['threshold'\] of attention = 'tra'"
    with pytest.raises(ValueError, match=missing):
        TransformerLM.from_pretrained(tmp_path)
    partial = ModelConfig.from_dict({"attention_options": {"local_window": 2}}, partial=True)  # written by hand
    assert partial.attention_options.threshold == 0.0 and partial.attention_options.local_window == 2


def test_an_option_no_forward_can_take_is_refused_where_it_is_set():
    with pytest.raises(ValueError, match=r"TRAOptions\.threshold = inf; expected a number below \+inf"):
        ModelConfig(attention_options={"threshold": math.inf})
    with pytest.raises(ValueError, match=r"TRAOptions\.threshold = nan"):
        ModelConfig(attention_options={"threshold": math.nan})
    assert ModelConfig(attention_options={"threshold": -math.inf}).attention_options.threshold == -math.inf


def test_a_model_saved_in_float64_loads_in_float64(tmp_path):
    model = small().double()
    model.save_pretrained(tmp_path)
    loaded = TransformerLM.from_pretrained(tmp_path)
    x = torch.randint(11, (2, 7))
    assert next(loaded.parameters()).dtype == torch.float64 and torch.equal(loaded(x), model(x))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_runs_forward_and_backward_on_meta_tensors(kind):
    """Shapes alone (planning memory, tracing): no value is read, no autocast is entered."""
    with torch.device("meta"):
        model = small(kind)
    logits = model(torch.zeros(2, 9, dtype=torch.long, device="meta"))
    logits.sum().backward()
    assert logits.shape == (2, 9, 11) and logits.is_meta and model.embed.weight.grad.is_meta
