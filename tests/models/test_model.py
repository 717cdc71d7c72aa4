"""Every attention kind in the shared model (and the TRA ablations, options of tra): it trains, it saves and reloads
bit-exactly, and caches agree."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.conftest import attention_fields, attention_settings, block_parts, sharing_kinds
from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM
from tra_attn.models.config import VERSION as MODEL_VERSION
from tra_attn.upgrade.configs import upgrade_model_config
from tra_attn.utils.dataclass_io import OldVersion

KINDS = attention_settings(sorted(ATTENTION_KINDS))  # every kind, and the TRA ablations by their former names
# Every kind as it is, and TRA with a threshold also with the keep rule's windows (a local window shorter than the
# cached prefix, and a windowed dense head): the cache holds every key, the windows pick.
WINDOWS = {"attention_options": {"local_window": 3, "dense_heads": 1, "dense_window": 5}}
CACHE_CASES = [(kind, {}) for kind in KINDS] + [(kind, WINDOWS) for kind in ("tra", "tra_keygate", "tra_nodistance")]
CACHE_CASES += [(kind, block_parts(kind)) for kind in sorted(ATTENTION_KINDS) if block_parts(kind)]


def cache_case_id(case):
    return case if isinstance(case, str) else ("windows" if case == WINDOWS else "block" if case else "")


def tiny_config(kind, **overrides):
    """A small config of ``kind`` (a kind, or a TRA ablation's name), its attention options merged with any given."""
    base = dict(vocab_size=13, d_model=32, n_layers=2, n_heads=4)
    attention = attention_fields(kind, **overrides.pop("attention_options", {}))
    return ModelConfig(**{**base, **attention, **overrides})


def counting_batch(gen, batch=16, length=24, vocab=13):
    """Sequences start, start + 1, ... (mod vocab): every token after the first is predictable."""
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    return (start + torch.arange(length)) % vocab


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("style", ["prenorm", "paper"])
def test_every_kind_trains_with_decreasing_loss(kind, style):
    torch.manual_seed(0)
    model = TransformerLM(tiny_config(kind, block_style=style))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(25):
        ids = counting_batch(gen)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, f"{kind}/{style}: loss {first:.3f} -> {last:.3f}"


@pytest.mark.parametrize("kind", KINDS)
def test_save_and_load_round_trip_is_bit_exact(kind, tmp_path):
    torch.manual_seed(1)
    model = TransformerLM(tiny_config(kind, dropout=0.1)).eval()
    with torch.no_grad():  # make every parameter non-trivial, including zero-initialised ones
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["attention"] == model.config.attention
    loaded = TransformerLM.from_pretrained(tmp_path).eval()
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 13, (2, 21))
    assert torch.equal(model(ids), loaded(ids))
    assert not list(tmp_path.glob("*.tmp")), "temporary files left behind"


@pytest.mark.parametrize("kind", sharing_kinds())
def test_parameters_shared_across_layers_are_saved_once_and_load_tied(kind, tmp_path):
    """A kind's parameters shared across layers: one tensor under the first layer's name in the state dict and the
    safetensors file (which refuses tensors that share memory); loading (from a folder, or a state dict, also with
    ``assign``) leaves every layer holding that one tensor, bit for bit; other values under a later layer's name are
    refused."""
    torch.manual_seed(1)
    model = TransformerLM(tiny_config(kind, n_layers=3)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    aliases = model.shared_aliases()
    assert aliases and all(name.startswith("blocks.0.") for name in aliases.values())
    assert set(model.state_dict()).isdisjoint(aliases)
    model.save_pretrained(tmp_path)
    assert sorted(load_file(str(tmp_path / "model.safetensors"))) == sorted(model.state_dict())
    ids = torch.randint(0, 13, (2, 21))
    again = TransformerLM(tiny_config(kind, n_layers=3)).eval()
    again.load_state_dict(model.state_dict(), assign=True)
    for loaded in (TransformerLM.from_pretrained(tmp_path).eval(), again):
        assert loaded.shared_aliases() == aliases
        for alias, name in aliases.items():
            assert loaded.get_parameter(alias) is loaded.get_parameter(name)
            assert torch.equal(loaded.get_parameter(name), model.get_parameter(name))
        assert torch.equal(loaded(ids), model(ids))
        assert len(list(loaded.parameters())) == len(list(model.parameters()))
    alias, name = next(iter(aliases.items()))
    full = {**model.state_dict(), alias: model.get_parameter(name).detach()}
    again.load_state_dict(full)  # the same value under every name: accepted
    with pytest.raises(RuntimeError, match=re.escape(f"{alias}: a parameter this model shares with {name}")):
        again.load_state_dict({**full, alias: full[alias] + 1})


def test_from_pretrained_rejects_missing_and_corrupt_directories(tmp_path):
    with pytest.raises(ValueError, match="config.json does not exist"):
        TransformerLM.from_pretrained(tmp_path / "nowhere")
    model = TransformerLM(tiny_config("tra"))
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match="model.safetensors is corrupt"):
        TransformerLM.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not a valid config"):
        TransformerLM.from_pretrained(tmp_path)


def test_gate_bias_init_sets_gate_biases():
    model = TransformerLM(tiny_config("tra", attention_options={"gate_bias_init": 3.0}))
    assert all((b.attn.gate_proj.bias == 3.0).all() for b in model.blocks)
    fox = TransformerLM(tiny_config("fox", attention_options={"gate_bias_init": -1.0}))
    assert all((b.attn.fgate_proj.bias == -1.0).all() for b in fox.blocks)


TRA_KINDS = [k for k in KINDS if k.startswith("tra")]


@pytest.mark.parametrize("kind", TRA_KINDS)
def test_learned_temperature_starts_as_plain_tra_and_learns(kind):
    torch.manual_seed(4)
    plain = TransformerLM(tiny_config(kind)).double()
    tempered = TransformerLM(tiny_config(kind, attention_options={"learned_temperature": True})).double()
    missing, unexpected = tempered.load_state_dict(plain.state_dict(), strict=False)
    assert unexpected == [] and missing == [f"blocks.{i}.attn.log_temperature" for i in range(2)]
    ids = torch.randint(0, 13, (2, 17))
    # t_h = exp(0) = 1 at initialisation (in evaluation both normalise q and k in the layer; a training forward of
    # the plain model lets the op normalise them, equal to rounding)
    assert torch.equal(tempered.eval()(ids), plain.eval()(ids))
    tempered.train()
    loss = tempered(ids[:, :-1], labels=ids[:, 1:]).mean()
    loss.backward()
    assert all(b.attn.log_temperature.grad.abs().sum() > 0 for b in tempered.blocks)
    with torch.no_grad():
        for b in tempered.blocks:
            b.attn.log_temperature.fill_(1.5)
    cache = tempered.new_cache()
    parts = [tempered(ids[:, a:b], cache=cache) for a, b in ((0, 5), (5, 17))]
    torch.testing.assert_close(torch.cat(parts, dim=1), tempered(ids), atol=1e-10, rtol=1e-10)
    assert not torch.allclose(tempered(ids), plain(ids))


def test_version_2_model_configs_load_without_a_temperature():
    data = {k: v for k, v in tiny_config("tra").to_dict().items() if k != "attention_options"}
    data = {**data, "version": 2, "tra_threshold": 0.0, "tra_impl": "auto", "gate_bias_init": 0.0}
    with pytest.raises(OldVersion, match=r"ModelConfig version 2, written by an earlier version of tra; expected "
                       rf"version {MODEL_VERSION}: convert it with `tra upgrade PATH`"):  # fmt: skip
        ModelConfig.from_dict(data)
    upgraded = ModelConfig.from_dict(upgrade_model_config(data))
    assert upgraded.attention_options.learned_temperature is False and upgraded == tiny_config("tra")


@pytest.mark.parametrize("kind,options", CACHE_CASES, ids=cache_case_id)
def test_prefill_in_chunks_through_the_cache_equals_full_forward(kind, options):
    torch.manual_seed(2)
    model = TransformerLM(tiny_config(kind, **options)).double().eval()
    ids = torch.randint(0, 13, (2, 23))
    full = model(ids)
    cache = model.new_cache()
    parts = [model(ids[:, a:b], cache=cache) for a, b in ((0, 9), (9, 10), (10, 23))]
    assert cache.length == 23
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("kind,options", CACHE_CASES, ids=cache_case_id)
def test_cached_greedy_generation_equals_uncached(kind, options):
    torch.manual_seed(3)
    model = TransformerLM(tiny_config(kind, n_layers=2, **options))
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        model.lm_head.weight.mul_(20)
    prompt = torch.randint(0, 13, (3, 7))
    cached = model.generate(prompt, max_new_tokens=15, temperature=0)
    uncached = model.generate(prompt, max_new_tokens=15, temperature=0, use_cache=False)
    assert cached.shape == (3, 22) and torch.equal(cached[:, :7], prompt)
    assert torch.equal(cached, uncached)


def test_sampling_is_reproducible_and_respects_top_k():
    torch.manual_seed(4)
    model = TransformerLM(tiny_config("tra"))
    prompt = torch.randint(0, 13, (2, 5))
    a = model.generate(prompt, 12, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(0))
    b = model.generate(
        prompt, 12, temperature=1.0, top_k=3, use_cache=False, generator=torch.Generator().manual_seed(0)
    )
    assert torch.equal(a, b)
    assert model.generate(prompt, 0).shape == prompt.shape
    with pytest.raises(ValueError, match=r"temperature = -1"):
        model.generate(prompt, 3, temperature=-1)
    with pytest.raises(ValueError, match=r"top_k = 0"):
        model.generate(prompt, 3, top_k=0)
    with pytest.raises(ValueError, match=r"max_new_tokens = -2"):
        model.generate(prompt, -2)


def test_generate_restores_training_mode():
    model = TransformerLM(tiny_config("rope", dropout=0.5)).train()
    model.generate(torch.zeros(1, 3, dtype=torch.long), 2)
    assert model.training
