"""The model API under bad input: configs, forward, labels, generation, caches, the registry.

Every refusal is a ValueError (or TypeError for a wrong kind of object) whose message names the
argument, shows the value and says what was expected."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from tra_attn import ATTENTION_KINDS, AttentionKind, ModelConfig, TransformerLM, register_attention
from tra_attn.layers import check_model_config
from tra_attn.layers.cache import LayerCache
from tra_attn.training import TrainConfig

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
        ({"d_model": 0}, r"ModelConfig\.d_model = 0; expected a positive integer"),
        ({"d_model": 16.0}, r"ModelConfig\.d_model = 16\.0; expected a positive integer"),
        ({"n_layers": 0}, r"ModelConfig\.n_layers = 0; expected a positive integer"),
        ({"n_heads": -1}, r"ModelConfig\.n_heads = -1; expected a positive integer"),
        ({"cope_max_pos": 0}, r"ModelConfig\.cope_max_pos = 0; expected a positive integer"),
        ({"d_model": 18, "n_heads": 4}, r"ModelConfig\.d_model = 18; expected a multiple of n_heads = 4"),
        ({"block_style": "post"}, r"ModelConfig\.block_style = 'post'; expected 'prenorm' or 'paper'"),
        ({"dropout": 1.0}, r"ModelConfig\.dropout = 1\.0; expected a probability in \[0, 1\)"),
        ({"dropout": -0.1}, r"ModelConfig\.dropout = -0\.1; expected a probability"),
        ({"dropout": math.nan}, r"ModelConfig\.dropout = nan; expected a probability"),
        ({"mlp_ratio": 0.0}, r"ModelConfig\.mlp_ratio = 0\.0; expected a finite positive number"),
        ({"mlp_ratio": 0.005}, r"ModelConfig\.mlp_ratio = 0\.005; expected a ratio giving an MLP at least 1 wide"),
        ({"mlp_ratio": math.inf}, r"ModelConfig\.mlp_ratio = inf; expected a finite positive number"),
        ({"norm_eps": 0.0}, r"ModelConfig\.norm_eps = 0\.0; expected a finite positive number"),
        ({"norm_eps": math.nan}, r"ModelConfig\.norm_eps = nan; expected a finite positive number"),
        ({"init_std": -0.02}, r"ModelConfig\.init_std = -0\.02; expected a finite positive number"),
        ({"rope_base": 0}, r"ModelConfig\.rope_base = 0; expected a finite positive number"),
        ({"gate_bias_init": math.nan}, r"ModelConfig\.gate_bias_init = nan; expected a finite number"),
        ({"gate_bias_init": -math.inf}, r"ModelConfig\.gate_bias_init = -inf; expected a finite number"),
        ({"gate_bias_init": "0"}, r"ModelConfig\.gate_bias_init = '0'; expected a finite number"),
        ({"tra_threshold": math.nan}, r"ModelConfig\.tra_threshold = nan; expected a number"),
        ({"tra_threshold": "0"}, r"ModelConfig\.tra_threshold = '0'; expected a number"),
        ({"tra_threshold_warmup": -1}, r"ModelConfig\.tra_threshold_warmup = -1; expected a non-negative integer"),
        ({"tra_threshold_warmup": 2.0}, r"ModelConfig\.tra_threshold_warmup = 2\.0; expected a non-negative integer"),
    ],
)
def test_bad_model_config(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            {"attention": "rope", "d_model": 6, "n_heads": 2},
            r"ModelConfig\.d_model = 6; expected an even head dimension",
        ),
        ({"attention": "TRA"}, r"ModelConfig\.attention = 'TRA'; expected one of \['tra'"),
        ({"attention": None}, r"ModelConfig\.attention = None; expected one of"),
        ({"attention": ["tra"]}, r"ModelConfig\.attention = \['tra'\]; expected one of"),
        ({"tra_impl": "cuda"}, r"ModelConfig\.tra_impl = 'cuda'; expected one of \('auto', 'naive'"),
        ({"attention": "tra_keygate", "tra_impl": "fast"}, r"ModelConfig\.tra_impl = 'fast'; expected one of"),
        ({"attention": "fox", "tra_dense_heads": 1}, r"tra_dense_heads = 1; expected 0 for attention = 'fox', which"),
        (
            {"attention": "rope", "tra_threshold_warmup": 3},
            r"tra_threshold_warmup = 3; expected 0 for attention = 'rope'",
        ),
    ],
)
def test_the_registry_checks_run_where_models_and_runs_are_built(kwargs, pattern):
    """The config is data: it holds these values; building a model (or a run) refuses them."""
    config = ModelConfig(**{"n_heads": 4, **kwargs})
    with pytest.raises(ValueError, match=pattern):
        check_model_config(config)
    with pytest.raises(ValueError, match=pattern):
        TransformerLM(config)
    with pytest.raises(ValueError, match=pattern):
        TrainConfig(task="flipflop", model=dataclasses.replace(config, vocab_size=6))


def test_a_saved_model_of_an_unknown_kind_is_refused_when_loaded(tmp_path):
    small().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "attention": "flash"}))
    with pytest.raises(ValueError, match=r"ModelConfig\.attention = 'flash'; expected one of \['tra'"):
        TransformerLM.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "data,pattern",
    [
        ({"n_embd": 16}, r"ModelConfig: unknown fields \['n_embd'\]; expected a subset of"),
        ([16, 1], r"ModelConfig: got list; expected a JSON object of fields"),
        ("{}", r"ModelConfig: got str; expected a JSON object of fields"),
        ({"version": 7}, r"ModelConfig: version = 7; expected a version from 1 to 6 \(newer files need a newer tra\)"),
        ({**ModelConfig().to_dict(), "tokenizer": "byte"}, r"ModelConfig\.tokenizer = 'byte'; expected None or a"),
        ({**ModelConfig().to_dict(), "tokenizer": {"name": "gpt2", "vocab_size": 50257}}, r"at most vocab_size = 256"),
    ],
)
def test_bad_model_config_dicts(data, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig.from_dict(data)


def test_version_1_model_configs_load_without_a_tokenizer():
    v1 = {k: v for k, v in ModelConfig(d_model=32).to_dict().items() if k not in ("version", "tokenizer")}
    assert ModelConfig.from_dict(v1) == ModelConfig(d_model=32)
    with pytest.raises(ValueError, match=r"missing fields \['tokenizer'\]"):
        ModelConfig.from_dict({**v1, "version": 2})


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
