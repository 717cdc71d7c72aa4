"""TRA as an attention implementation of transformers' own classes (``tra_attn.hf.add_tra``): Llama and Qwen3 on
small random configs, causal, decoding with Hugging Face's caches as the full forward does, padded rows as each row
alone, RoPE kept or removed, save and load, and clear refusals of what cannot work."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from tra_attn.hf.interface import add_tra, attention_modules, load_tra  # noqa: E402

SIZES = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0)  # fmt: skip
CLASSES = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}


def tiny(family: str = "llama", **settings):
    torch.manual_seed(0)
    config_class, model_class = CLASSES[family]
    extra = {"head_dim": 8} if family == "qwen3" else {}
    model = add_tra(model_class(config_class(**SIZES, **extra)), **settings).eval()
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        model.lm_head.weight.mul_(20)
    return model


def ids(b=2, s=12, seed=1):
    return torch.randint(1, 50, (b, s), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", sorted(CLASSES))
@pytest.mark.parametrize("rope", ["keep", "remove"])
def test_a_model_with_tra_is_causal_and_decodes_with_its_caches_as_the_full_forward(family, rope):
    model, x = tiny(family, rope=rope, local_window=2), ids()
    with torch.no_grad():
        full = model(x, use_cache=False).logits
        changed = x.clone()
        changed[:, 8] = changed[:, 8] % 49 + 1
        later = model(changed, use_cache=False).logits
        assert torch.equal(later[:, :8], full[:, :8]) and not torch.allclose(later[:, 8:], full[:, 8:])
        torch.testing.assert_close(model(x).logits, full)  # prefill into a DynamicCache
    greedy = model.generate(x, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False), greedy)
    assert torch.equal(model.generate(x, max_new_tokens=8, do_sample=False, cache_implementation="static"), greedy)


@pytest.mark.parametrize("family", sorted(CLASSES))
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
    mistral = MistralForCausalLM(MistralConfig(**SIZES, sliding_window=4))
    with pytest.raises(ValueError, match=r"add_tra: MistralForCausalLM has sliding-window layers"):
        add_tra(mistral)
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
