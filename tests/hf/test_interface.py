"""TRA as an attention implementation of transformers' own classes (``tra_attn.hf.add_tra``), and TRA, FoX and ALiBi
through the same mechanism (``add_attention``): Llama, Qwen3 and fourteen more families on small random configs (TRA
also in seven with sliding-window layers), the library's op on the model's own q, k and v in fp64, causal, decoding
with Hugging Face's caches (and beam search) as the full forward does, padded rows as each row alone, RoPE kept or
removed, save and load, and clear refusals of what cannot work."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from tra_attn.hf import add_attention, load_attention  # noqa: E402
from tra_attn.hf.attention import KINDS  # noqa: E402
from tra_attn.hf.interface import add_tra, attention_modules, load_tra  # noqa: E402
from tra_attn.ops.alibi import alibi_attention, alibi_slopes  # noqa: E402
from tra_attn.ops.fox import forgetting_attention  # noqa: E402
from tra_attn.ops.tra import threshold_relative_attention  # noqa: E402

SIZES = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0)  # fmt: skip
NO_SPECIAL_TOKENS = dict(bos_token_id=None, eos_token_id=None)  # their defaults lie outside the tiny vocabulary
# Each family: its config and model classes (by name in transformers) and what its tiny config sets beyond SIZES.
FAMILIES = {
    "llama": ("Llama", {}),
    "qwen3": ("Qwen3", {"head_dim": 8}),
    "qwen3_moe": ("Qwen3Moe", {"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}),
    "qwen2": ("Qwen2", {}),
    "mistral": ("Mistral", {"sliding_window": None}),
    "gemma": ("Gemma", {"head_dim": 8}),
    "olmo": ("Olmo", {}),
    "olmo2": ("Olmo2", NO_SPECIAL_TOKENS),
    "granite": ("Granite", {}),
    "cohere": ("Cohere", NO_SPECIAL_TOKENS),
    "glm": ("Glm", {}),
    "smollm3": ("SmolLM3", NO_SPECIAL_TOKENS),
    "starcoder2": ("Starcoder2", {"sliding_window": None, **NO_SPECIAL_TOKENS}),
    "helium": ("Helium", {"head_dim": 8}),
    "phi": ("Phi", {}),  # its output projection is named dense
    "phi3": ("Phi3", {"sliding_window": None, **NO_SPECIAL_TOKENS}),  # q, k and v in one projection
}
FAMILY_NAMES = sorted(FAMILIES)
# Families with sliding-window layers (a window of 4 keys, shorter than the tests' 12 tokens and 8 new ones), which
# TRA runs (the op's sliding_window) and FoX and ALiBi refuse: every layer, or alternating with full ones.
ALTERNATING = {"layer_types": ["sliding_attention", "full_attention"]}
SLIDING = {
    "mistral_sliding": ("Mistral", {"sliding_window": 4}),
    "qwen2_sliding": ("Qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}),
    "starcoder2_sliding": ("Starcoder2", {"sliding_window": 4, **NO_SPECIAL_TOKENS}),
    "gemma2_sliding": ("Gemma2", {"head_dim": 8, "sliding_window": 4}),
    "gemma3_sliding": ("Gemma3Text", {"head_dim": 8, "sliding_window": 4, **ALTERNATING}),
    "cohere2_sliding": ("Cohere2", {"sliding_window": 4, **ALTERNATING, **NO_SPECIAL_TOKENS}),
    "phi3_sliding": ("Phi3", {"sliding_window": 4, **NO_SPECIAL_TOKENS}),
}
TRA_FAMILY_NAMES = FAMILY_NAMES + sorted(SLIDING)


def build(family: str, **changes):
    """A small random model of ``family`` (seed 0), its config changed by ``changes``."""
    torch.manual_seed(0)
    prefix, extra = {**FAMILIES, **SLIDING}[family]
    config_class = getattr(transformers, f"{prefix}Config")
    model_class = getattr(transformers, f"{prefix.removesuffix('Text')}ForCausalLM")  # Gemma3TextConfig: Gemma3...
    return model_class(config_class(**SIZES, **{**extra, **changes}))


def tiny(family: str = "llama", config=None, **settings):
    model = add_tra(build(family, **(config or {})), **settings).eval()
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        model.lm_head.weight.mul_(20)
    return model


def ids(b=2, s=12, seed=1):
    return torch.randint(1, 50, (b, s), generator=torch.Generator().manual_seed(seed))


def assert_causal(model, x, at=8):
    """Changing token `at` leaves every earlier logit as it was and moves the later ones; returns the logits.

    Earlier logits are compared to float32 rounding, not bit for bit: a mixture of experts runs each
    expert on the group of tokens routed to it, and a group's matmul may round its rows differently
    when a later token joins or leaves it (seen on a 2-core CI machine with Qwen3-MoE).
    """
    full = model(x, use_cache=False).logits
    changed = x.clone()
    changed[:, at] = changed[:, at] % 49 + 1
    later = model(changed, use_cache=False).logits
    torch.testing.assert_close(later[:, :at], full[:, :at], rtol=1e-5, atol=1e-5)
    assert (later[:, at:] - full[:, at:]).abs().amax() > 1e-3
    return full


@pytest.mark.parametrize("family", TRA_FAMILY_NAMES)
@pytest.mark.parametrize("rope", ["keep", "remove"])
def test_a_model_with_tra_is_causal_and_decodes_with_its_caches_as_the_full_forward(family, rope):
    model, x = tiny(family, rope=rope, local_window=2), ids()
    with torch.no_grad():
        full = assert_causal(model, x)
        torch.testing.assert_close(model(x).logits, full)  # prefill into a DynamicCache
    greedy = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False), greedy)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False, cache_implementation="static"), greedy)


@pytest.mark.parametrize("family", TRA_FAMILY_NAMES)
def test_left_padded_rows_compute_and_generate_what_each_row_alone_does(family):
    model = tiny(family)
    prompts = [ids(1, 9, 2)[0], ids(1, 4, 3)[0], ids(1, 6, 4)[0]]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for row, p in enumerate(prompts):
        batch[row, width - len(p) :], mask[row, width - len(p) :] = p, 1
    with torch.no_grad():
        logits = model(batch, attention_mask=mask, use_cache=False).logits
    out = model.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False)
    static = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    assert torch.equal(model.generate(batch, attention_mask=mask, **static), out)
    for row, p in enumerate(prompts):
        with torch.no_grad():
            torch.testing.assert_close(logits[row, width - len(p) :], model(p[None], use_cache=False).logits[0])
        alone = model.generate(p[None], max_new_tokens=6, do_sample=False)[0]  # (it may stop early, at eos)
        assert torch.equal(out[row, width - len(p) : width - len(p) + len(alone)], alone), row


@pytest.mark.parametrize("window", [4, None])
def test_a_sliding_window_layer_sees_its_window_alone(window):
    """Two layers of 4-key windows: logits at positions 7 and on cannot see token 0 (each layer reaches 3 back);
    with every key kept (threshold -inf) and no window, they do."""
    model, x = tiny("mistral_sliding", config={"sliding_window": window}, threshold=float("-inf")), ids()
    changed = x.clone()
    changed[:, 0] = changed[:, 0] % 49 + 1
    with torch.no_grad():
        full, later = model(x, use_cache=False).logits, model(changed, use_cache=False).logits
    assert not torch.allclose(later[:, 6], full[:, 6])
    assert torch.equal(later[:, 7:], full[:, 7:]) == (window is not None)


def test_a_mask_other_than_causal_within_the_window_is_refused():
    from transformers.masking_utils import causal_mask_function, or_masks, sliding_window_causal_mask_function

    from tra_attn.hf.attach import is_sliding_causal, padding_mask_function

    assert is_sliding_causal(sliding_window_causal_mask_function(4), 4)
    assert not is_sliding_causal(sliding_window_causal_mask_function(4), 5)
    assert not is_sliding_causal(causal_mask_function, 4)
    look_ahead = or_masks(sliding_window_causal_mask_function(4), lambda b, h, q, kv: kv == q + 1)
    assert not is_sliding_causal(look_ahead, 4)
    with pytest.raises(ValueError, match=r"a mask other than causal or causal within a sliding window; expected one"):
        padding_mask_function("tra", sliding=True)(1, 4, 4, mask_function=look_ahead, local_size=4)
    with pytest.raises(ValueError, match=r"a mask other than causal \(sliding or chunked attention\); expected full"):
        padding_mask_function("tra_fox")(1, 4, 4, mask_function=sliding_window_causal_mask_function(4), local_size=4)


def test_rope_removed_leaves_positions_to_tra_alone():
    """Shifting every position changes a RoPE model's logits only through the rotation (none left)."""
    x = ids()
    shifted = torch.arange(12)[None].expand(2, -1) + 7
    with torch.no_grad():
        for rope, invariant in (("remove", True), ("keep", False)):
            model = tiny(rope=rope)
            same = torch.allclose(
                model(x, use_cache=False).logits, model(x, position_ids=shifted, use_cache=False).logits
            )
            assert same == invariant, rope


def test_the_gates_train_and_save_and_load_with_the_model(tmp_path):
    model = tiny(keep_surrogate=1.0, gate_bias_init=1.0).train()
    x = ids()
    model(x, labels=x).loss.backward()
    gates = [m.forget_gate for m in attention_modules(model)]
    assert len(gates) == 2 and all(g.weight.grad is not None and g.weight.grad.abs().sum() > 0 for g in gates)
    assert torch.equal(gates[0].bias.detach(), torch.ones(4))
    model.eval().save_pretrained(tmp_path)
    loaded = load_tra(tmp_path)
    assert loaded.config.tra == model.config.tra and loaded.config._attn_implementation == "tra"
    with torch.no_grad():
        assert torch.equal(loaded(x, use_cache=False).logits, model(x, use_cache=False).logits)


def test_what_cannot_work_is_refused_by_name(tmp_path):
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match=r"add_tra: GPT2LMHeadModel has no attention module with q/k/v/o proj"):
        add_tra(gpt2)
    for kind, rope in (("fox", "keep"), ("alibi", "remove")):
        with pytest.raises(ValueError, match=r"add_attention: MistralForCausalLM has sliding-window layers; expected"):
            add_attention(build("mistral_sliding"), kind, rope=rope)
    from tra_attn.hf import TRAConfig, TRAForCausalLM

    with pytest.raises(ValueError, match=r"TRAForCausalLM does not run its attention through transformers' atten"):
        add_tra(TRAForCausalLM(TRAConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2)))
    model = tiny()
    with pytest.raises(ValueError, match=r"already has TRA attention"):
        add_tra(model)
    with pytest.raises(ValueError, match=r"rope = 'drop'; expected one of \('keep', 'remove'\)"):
        add_tra(LlamaForCausalLM(LlamaConfig(**SIZES)), rope="drop")
    plain = LlamaForCausalLM(LlamaConfig(**SIZES))
    plain.set_attn_implementation("tra")
    with pytest.raises(ValueError, match=r"without TRA's gate; expected a model prepared by tra_attn\.hf\.add_tra"):
        plain(ids())
    plain.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"holds no model of add_tra"):
        load_tra(tmp_path)


# add_attention: TRA, FoX and ALiBi through the same mechanism.

CONVERSIONS = [("tra", "keep"), ("tra", "remove"), ("fox", "keep"), ("fox", "remove"), ("alibi", "remove")]


def converted(family="llama", kind="fox", rope="remove", **settings):
    model = add_attention(build(family), kind, rope=rope, **settings).eval()
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        model.lm_head.weight.mul_(20)
        for module in attention_modules(model):  # gates that differ per position and head
            if hasattr(module, "forget_gate"):
                module.forget_gate.weight.mul_(50)
    return model


def library_attention(module, hidden, rotation, kind):
    """The library's op on the q, k and v this Llama attention module computes from ``hidden``, with ``rotation``
    (cos, sin) or none, in the module's dtype: (B, S, H * D)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, s, _ = hidden.shape
    d, heads = module.head_dim, module.config.num_attention_heads

    def project(linear):
        return linear(hidden).view(b, s, -1, d).transpose(1, 2)

    q, k, v = project(module.q_proj), project(module.k_proj), project(module.v_proj)
    if rotation is not None:
        q, k = apply_rotary_pos_emb(q, k, *rotation)
    groups = heads // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    if kind == "alibi":
        out = alibi_attention(q, k, v, alibi_slopes(heads).to(q.dtype), scale=d**-0.5)
    else:
        log_gate = F.logsigmoid(module.forget_gate(hidden)).transpose(1, 2)
        if kind == "fox":
            out = forgetting_attention(q, k, v, log_gate, scale=d**-0.5)
        else:
            eps = module.config.rms_norm_eps
            out = threshold_relative_attention(F.rms_norm(q, (d,), eps=eps), F.rms_norm(k, (d,), eps=eps), v, log_gate)
    return out.transpose(1, 2).reshape(b, s, heads * d)


@pytest.mark.parametrize(("kind", "rope"), CONVERSIONS)
def test_each_kind_is_the_library_op_on_the_models_own_q_k_v_in_fp64(kind, rope):
    model = converted(kind=kind, rope=rope).double()
    seen = []
    for layer in model.model.layers:
        record = {}
        layer.self_attn.register_forward_pre_hook(
            lambda m, args, kwargs, r=record: r.update(hidden=kwargs["hidden_states"]), with_kwargs=True
        )
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, args, r=record: r.update(out=args[0]))
        seen.append((layer.self_attn, record))
    x = ids(2, 16)
    with torch.no_grad():
        model(x, use_cache=False)
        rotary = model.model.rotary_emb  # the model's own: rope="remove" wraps it in the identity
        rotation = rotary(seen[0][1]["hidden"], torch.arange(16)[None]) if rope == "keep" else None
        assert seen[0][1]["out"].dtype == torch.float64
        for module, record in seen:
            expected = library_attention(module, record["hidden"], rotation, kind)
            torch.testing.assert_close(record["out"], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize(("kind", "rope"), [("fox", "keep"), ("fox", "remove"), ("alibi", "remove")])
def test_fox_and_alibi_are_causal_and_decode_with_the_caches_as_the_full_forward(family, kind, rope):
    model, x = converted(family, kind, rope), ids()
    with torch.no_grad():
        full = assert_causal(model, x)
        torch.testing.assert_close(model(x).logits, full)  # prefill into a DynamicCache
    greedy = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False), greedy)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False, cache_implementation="static"), greedy)


def test_fox_gates_follow_the_cache_through_beam_search():
    """The gates of past keys live in the cache's values, so beam search's reordering moves them with the keys."""
    model, x = converted(kind="fox"), ids(2, 10, seed=5)
    beams = dict(max_new_tokens=8, do_sample=False, num_beams=3)
    assert torch.equal(model.generate(x, **beams), model.generate(x, **beams, use_cache=False))


@pytest.mark.parametrize("kind", ["fox", "alibi"])
def test_fox_and_alibi_left_padded_rows_compute_and_generate_what_each_row_alone_does(kind):
    model = converted(kind=kind)
    prompts = [ids(1, 9, 2)[0], ids(1, 4, 3)[0], ids(1, 6, 4)[0]]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for row, p in enumerate(prompts):
        batch[row, width - len(p) :], mask[row, width - len(p) :] = p, 1
    with torch.no_grad():
        logits = model(batch, attention_mask=mask, use_cache=False).logits
    out = model.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False)
    static = dict(max_new_tokens=6, do_sample=False, cache_implementation="static")
    assert torch.equal(model.generate(batch, attention_mask=mask, **static), out)
    for row, p in enumerate(prompts):
        with torch.no_grad():
            torch.testing.assert_close(logits[row, width - len(p) :], model(p[None], use_cache=False).logits[0])
        alone = model.generate(p[None], max_new_tokens=6, do_sample=False)[0]
        assert torch.equal(out[row, width - len(p) : width - len(p) + len(alone)], alone), row


SAVED_AS_CONVERTED = [("llama", "tra", "keep"), ("llama", "fox", "remove"), ("qwen2", "alibi", "remove"),
                      ("mistral_sliding", "tra", "remove")]  # fmt: skip


@pytest.mark.parametrize(("family", "kind", "rope"), SAVED_AS_CONVERTED)
def test_a_saved_converted_model_never_loads_as_the_plain_family_model(family, kind, rope, tmp_path):
    """The folder says it holds a converted model: with tra_attn imported, the Auto classes load it as that model
    (gates, settings and logits); a process that never imports tra_attn cannot load it at all, where it used to
    load the family's model without the kind (logits off by whole units). A folder saved the former way loads
    through load_attention and is converted by tra upgrade."""
    import json
    import subprocess
    import sys

    from transformers import AutoConfig, AutoModelForCausalLM

    from tra_attn.cli import main

    model = converted(family, kind=kind, rope=rope)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    family_type = build(family).config.model_type
    assert saved["model_type"] == "converted_by_tra_attn" and saved["base_model_type"] == family_type
    x = ids()
    with torch.no_grad():
        expected = model(x, use_cache=False).logits
        for loaded in (AutoModelForCausalLM.from_pretrained(tmp_path), load_attention(tmp_path)):
            assert type(loaded) is type(model) and type(loaded.config) is type(model.config)
            assert getattr(loaded.config, KINDS[kind].key) == getattr(model.config, KINDS[kind].key)
            assert torch.equal(loaded(x, use_cache=False).logits, expected)
        fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))  # new gates, same kind
        key = KINDS[kind].key
        assert type(fresh) is type(model) and getattr(fresh.config, key) == getattr(model.config, key)
    with pytest.raises(ValueError, match=r"loads through tra_attn\.hf\.load_attention\(folder, dtype=\.\.\.\), which "
                       r"takes no \['device_map'\]"):  # fmt: skip
        AutoModelForCausalLM.from_pretrained(tmp_path, device_map="cpu")
    plain = "from transformers import AutoModelForCausalLM as A; import sys; A.from_pretrained(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", plain, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0 and "model type `converted_by_tra_attn`" in done.stderr, done.stderr[-2000:]
    former = {k: v for k, v in saved.items() if k != "base_model_type"} | {"model_type": saved["base_model_type"]}
    (tmp_path / "config.json").write_text(json.dumps(former))
    with torch.no_grad():
        assert torch.equal(load_attention(tmp_path)(x, use_cache=False).logits, expected)
    from tra_attn.hf.attach import CONVERTED
    from tra_attn.upgrade.files import CONVERTED_KEYS

    assert sorted(CONVERTED_KEYS) == sorted(CONVERTED)  # what tra upgrade looks for, named without transformers
    assert main(["upgrade", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "config.json").read_text()) == saved
    with torch.no_grad():
        assert torch.equal(AutoModelForCausalLM.from_pretrained(tmp_path)(x, use_cache=False).logits, expected)


@pytest.mark.parametrize(("kind", "rope"), CONVERSIONS)
def test_each_kind_trains_saves_and_loads_with_its_settings(kind, rope, tmp_path):
    settings = {"gate_bias_init": 1.0} if kind != "alibi" else {}
    model = converted(kind=kind, rope=rope, **settings).train()
    x = ids()
    model(x, labels=x).loss.backward()
    gates = [m.forget_gate for m in attention_modules(model) if hasattr(m, "forget_gate")]
    assert len(gates) == (0 if kind == "alibi" else 2)
    assert all(g.weight.grad is not None and g.weight.grad.abs().sum() > 0 for g in gates)
    model.eval().save_pretrained(tmp_path)
    loaded = load_attention(tmp_path)
    key = {"tra": "tra", "fox": "fox_attention", "alibi": "alibi_attention"}[kind]
    assert getattr(loaded.config, key) == getattr(model.config, key) and getattr(model.config, key)["rope"] == rope
    assert loaded.config._attn_implementation == model.config._attn_implementation
    with torch.no_grad():
        assert torch.equal(loaded(x, use_cache=False).logits, model(x, use_cache=False).logits)
    if kind != "tra":
        with pytest.raises(ValueError, match=r"load_tra: .* holds no model of add_tra"):
            load_tra(tmp_path)


def test_add_attention_with_kind_tra_is_add_tra():
    def built(convert):
        torch.manual_seed(0)
        return convert(LlamaForCausalLM(LlamaConfig(**SIZES))).eval()

    by_add_tra = built(lambda m: add_tra(m, rope="remove", local_window=2))
    by_kind = built(lambda m: add_attention(m, "tra", rope="remove", local_window=2))
    assert by_kind.config.tra == by_add_tra.config.tra and by_kind.config._attn_implementation == "tra"
    x = ids()
    with torch.no_grad():
        assert torch.equal(by_kind(x).logits, by_add_tra(x).logits)


def test_what_add_attention_cannot_do_is_refused_by_name(tmp_path):
    llama = LlamaForCausalLM(LlamaConfig(**SIZES))
    with pytest.raises(ValueError, match=r"add_attention: kind = 'cope'; expected one of \('tra', 'fox', 'alibi'\)"):
        add_attention(llama, "cope", rope="remove")
    with pytest.raises(ValueError, match=r"kind 'alibi' has no setting \['gate_bias_init'\]; expected some of \[\]"):
        add_attention(llama, "alibi", rope="remove", gate_bias_init=1.0)
    with pytest.raises(ValueError, match=r"kind 'fox' has no setting \['threshold'\]; expected some of"):
        add_attention(llama, "fox", rope="remove", threshold=0.5)
    with pytest.raises(ValueError, match=r"add_attention: rope = 'drop'; expected one of \('keep', 'remove'\)"):
        add_attention(llama, "fox", rope="drop")
    from tra_attn.hf import TRAConfig, TRAForCausalLM

    native = TRAForCausalLM(TRAConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(
        ValueError, match=r"add_attention: TRAForCausalLM does not run its attention through transformers' attention "
        r"interface \(_supports_attention_backend\); expected a model class that does"
    ):  # fmt: skip
        add_attention(native, "fox", rope="remove")
    with pytest.raises(ValueError, match=r"add_attention: Linear does not run its attention through"):
        add_attention(torch.nn.Linear(2, 2), "alibi", rope="remove")
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match=r"add_attention: GPT2LMHeadModel has no attention module with q/k/v/o"):
        add_attention(gpt2, "alibi", rope="remove")
    with pytest.raises(ValueError, match=r"add_attention: MistralForCausalLM has sliding-window layers"):
        add_attention(MistralForCausalLM(MistralConfig(**SIZES, sliding_window=4)), "fox", rope="remove")
    fox = converted(kind="fox")
    with pytest.raises(ValueError, match=r"add_tra: LlamaForCausalLM already has FoX attention \(config.fox_att"):
        add_tra(fox)
    with pytest.raises(ValueError, match=r"add_attention: LlamaForCausalLM already has TRA attention \(config.tra\)"):
        add_attention(tiny(), "alibi", rope="remove")
    plain = LlamaForCausalLM(LlamaConfig(**SIZES))
    plain.set_attn_implementation("tra_attn.fox")
    with pytest.raises(ValueError, match=r"without FoX's gate; expected a model prepared by tra_attn\.hf\.add_att"):
        plain(ids())
    plain.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"load_attention: .* holds no model of add_attention \(its config has no"):
        load_attention(tmp_path)
    plain = LlamaForCausalLM(LlamaConfig(**SIZES))
    plain.set_attn_implementation("tra_attn.alibi")  # runs, but its config would not say so: refused as TRA's is
    with pytest.raises(ValueError, match=r"attn_implementation='tra_attn\.alibi' on LlamaAttention of a model not "
                       r"converted to ALiBi; expected a model prepared by tra_attn\.hf\.add_attention\(model, "
                       r"kind='alibi'"):  # fmt: skip
        plain(ids())


@pytest.mark.parametrize("kind,settings,message", [
    ("tra", {"keep_surrogate": -1}, r"TRAOptions\.keep_surrogate = -1; expected a finite number >= 0"),
    ("tra", {"keep_surrogate": math.nan}, r"TRAOptions\.keep_surrogate = nan; expected a finite number >= 0"),
    ("tra", {"gate_bias_init": math.nan}, r"TRAOptions\.gate_bias_init = nan; expected a finite number"),
    ("tra", {"gate_bias_init": math.inf}, r"TRAOptions\.gate_bias_init = inf; expected a finite number"),
    ("tra", {"threshold": "high"}, r"TRAOptions\.threshold = 'high'; expected a number below \+inf"),
    ("tra", {"threshold": math.nan}, r"TRAOptions\.threshold = nan; expected a number below \+inf"),
    ("tra", {"local_window": 2.5}, r"TRAOptions\.local_window = 2\.5; expected a non-negative integer"),
    ("fox", {"gate_bias_init": math.nan}, r"FoXOptions\.gate_bias_init = nan; expected a finite number"),
])  # fmt: skip
def test_settings_are_checked_as_the_kinds_options_are(kind, settings, message):
    """A setting a model config would refuse is refused by add_attention (and add_tra) by the same check, naming the
    caller and the setting, before the model is touched."""
    llama = LlamaForCausalLM(LlamaConfig(**SIZES))
    before = {name: t.clone() for name, t in llama.state_dict().items()}
    with pytest.raises(ValueError, match=f"^add_attention: {message}"):
        add_attention(llama, kind, rope="keep", **settings)
    if kind == "tra":
        with pytest.raises(ValueError, match=f"^add_tra: {message}"):
            add_tra(llama, **settings)
    assert not hasattr(llama.config, "tra") and not hasattr(llama.config, "fox_attention")
    assert llama.state_dict().keys() == before.keys()
    assert (
        add_attention(llama, kind, rope="keep", gate_bias_init=1).config.__dict__[KINDS[kind].key]["gate_bias_init"]
        == 1.0
    )  # an integer for a number: held as the float the options class makes it
