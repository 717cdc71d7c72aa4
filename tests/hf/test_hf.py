"""Hugging Face interop: the wrapper's logits and decoding equal the library's for every attention kind,
conversion is exact both ways, the Auto classes and pipelines load a converted model, and bad input
gets clear errors. Skipped without ``transformers`` (the ``[hf]`` extra; CI installs it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")

from tests.cli.test_cli import run  # noqa: E402
from tests.conftest import attention_fields, attention_settings, sharing_kinds  # noqa: E402
from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM  # noqa: E402
from tra_attn.data.text.tokenizers import make_tokenizer  # noqa: E402
from tra_attn.hf import TRAConfig, TRAForCausalLM, hf_tokenizer, to_hf, to_native  # noqa: E402
from tra_attn.hf import convert as convert_module  # noqa: E402

KINDS = attention_settings(sorted(ATTENTION_KINDS))  # every kind, and the TRA ablations (options of tra)
BYTE = make_tokenizer("byte").describe()


def pair(kind: str, seed: int = 0, **fields) -> tuple[TransformerLM, TRAForCausalLM]:
    """A library model and its Hugging Face wrapper holding the same weights."""
    torch.manual_seed(seed)
    fields = {"vocab_size": 40, **fields}
    attention = attention_fields(kind, **({"max_pos": 32} if kind == "cope" else {}))
    config = ModelConfig(d_model=32, n_layers=2, n_heads=4, **attention, **fields)
    model = TransformerLM(config).eval()
    wrapper = TRAForCausalLM(TRAConfig.from_model_config(config)).eval()
    wrapper.model.load_state_dict(model.state_dict())
    return model, wrapper


@pytest.mark.parametrize("kind", KINDS)
def test_the_wrapper_computes_the_library_model_and_decodes_like_it(kind):
    model, wrapper = pair(kind)
    ids = torch.randint(0, 40, (2, 9))
    assert torch.equal(wrapper(ids, use_cache=False).logits, model(ids))
    assert torch.equal(wrapper(ids).logits, model(ids, cache=model.new_cache()))  # prefill into a fresh cache
    greedy = wrapper.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(greedy, model.generate(ids, 12, temperature=0))
    assert torch.equal(greedy, wrapper.generate(ids, max_new_tokens=12, do_sample=False, use_cache=False))
    sampled = [
        (torch.manual_seed(3), wrapper.generate(ids, max_new_tokens=10, do_sample=True, top_k=5, use_cache=c))[1]
        for c in (True, False)
    ]
    assert torch.equal(*sampled)
    beams = [wrapper.generate(ids, max_new_tokens=6, num_beams=3, do_sample=False, use_cache=c) for c in (True, False)]
    assert torch.equal(*beams)  # beam search reorders the cache (TRACache.reorder_cache) exactly


def test_labels_give_the_mean_shifted_next_token_loss():
    model, wrapper = pair("tra")
    ids = torch.randint(0, 40, (3, 11))
    labels = ids.clone()
    labels[1, 4:] = -100
    out = wrapper(ids, labels=labels)
    logits = model(ids)[:, :-1].flatten(0, 1)
    expected = F.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=-100)
    assert torch.allclose(out.loss, expected, rtol=1e-5) and torch.equal(
        out.logits, model(ids, cache=model.new_cache())
    )


def padded(prompts: list[list[int]], side: str, pad: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts padded with ``pad`` on ``side``, and their attention mask."""
    width = max(map(len, prompts))
    rows = [([pad] * (width - len(p)), p, [0] * (width - len(p)), [1] * len(p)) for p in prompts]
    if side == "left":
        return torch.tensor([f + p for f, p, _, _ in rows]), torch.tensor([z + o for _, _, z, o in rows])
    return torch.tensor([p + f for f, p, _, _ in rows]), torch.tensor([o + z for _, _, z, o in rows])


@pytest.mark.parametrize("kind", KINDS)
def test_padded_batches_compute_and_generate_each_row_alone(kind):
    _, wrapper = pair(kind)
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        wrapper.model.lm_head.weight.mul_(20)
    prompts = [[3, 1, 4, 1, 5, 9, 2], [6, 5], [3, 5, 8, 9]]
    alone = [wrapper(torch.tensor([p])).logits[0] for p in prompts]
    for side in ("left", "right"):
        ids, mask = padded(prompts, side, pad=10_000)  # a pad id outside the vocabulary (lm-eval adds one)
        out = wrapper(ids, attention_mask=mask, labels=ids, use_cache=False)
        for row in range(len(prompts)):
            torch.testing.assert_close(out.logits[row][mask[row].bool()], alone[row])
        # the targets in the padding are ignored: the loss is the mean over each row's own next tokens
        targets = torch.tensor([t for p in prompts for t in p[1:]])
        expected = F.cross_entropy(torch.cat([a[:-1] for a in alone]), targets)
        torch.testing.assert_close(out.loss, expected)
    ids, mask = padded(prompts, "left", pad=10_000)
    for use_cache in (True, False):
        batched = wrapper.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, use_cache=use_cache)
        for row, p in enumerate(prompts):
            single = wrapper.generate(torch.tensor([p]), max_new_tokens=6, do_sample=False)[0]
            assert torch.equal(batched[row, ids.shape[1] - len(p) :], single), (use_cache, row)
    beams = wrapper.generate(ids, attention_mask=mask, max_new_tokens=4, num_beams=3, do_sample=False)
    single = wrapper.generate(torch.tensor([prompts[1]]), max_new_tokens=4, num_beams=3, do_sample=False)[0]
    assert torch.equal(beams[1, -6:], single)


def test_generate_refuses_a_right_padded_prompt_as_the_native_model_does():
    """transformers only logs a warning and continues each row after its padding: a padded row got wrong tokens."""
    model, wrapper = pair("tra")
    ids, mask = padded([[3, 1, 4, 1, 5], [6, 5]], "right")
    with pytest.raises(ValueError, match=r"generate: attention_mask\[1, -1\] = 0; expected left padding"):
        model.generate(ids, 3, temperature=0, attention_mask=mask)
    for use_cache in (True, False):
        with pytest.raises(ValueError, match=r"attention_mask\[1, -1\] = 0; expected left padding .*padding_side"):
            wrapper.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, use_cache=use_cache)
    out = wrapper(ids, attention_mask=mask).logits  # the forward still takes right padding, exactly
    torch.testing.assert_close(out[1, :2], wrapper(ids[1:, :2]).logits[0])


@pytest.mark.parametrize("use_cache", [True, False])
def test_rows_that_finish_early_are_fed_the_tokenizers_pad_and_the_others_decode_as_alone(use_cache):
    """A pipeline passes the tokenizer's pad (the byte tokenizer's 256, outside the vocabulary) to generate, which
    feeds it to every row that has met its eos: the wrapper must still run, and the other rows be unchanged."""
    _, wrapper = pair("tra", vocab_size=256)
    prompts = [[3, 1, 4, 1, 5], [6, 5, 9]]
    first = wrapper.generate(torch.tensor([prompts[0]]), max_new_tokens=1, do_sample=False)[0, -1].item()
    alone = wrapper.generate(torch.tensor([prompts[1]]), max_new_tokens=5, do_sample=False)[0, 3:]
    assert first not in alone.tolist()  # row 1 runs all 5 steps
    ids, mask = padded(prompts, "left", pad=256)
    out = wrapper.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=5,
        do_sample=False,
        eos_token_id=first,
        pad_token_id=256,
        use_cache=use_cache,
    )
    assert out[0, 5:].tolist() == [first, 256, 256, 256, 256] and torch.equal(out[1, 5:], alone)


def test_the_pipeline_generates_batches_with_padding():
    from transformers import pipeline

    _, wrapper = pair("rope", vocab_size=256)
    tokenizer = hf_tokenizer("byte")  # its own pad, <pad> = 256: no pad to set by hand
    pipe = pipeline("text-generation", model=wrapper, tokenizer=tokenizer)
    prompts = ["It is a truth", "Emma", "Mr. Darcy said"]
    batched = pipe(prompts, max_new_tokens=5, do_sample=False, batch_size=2)
    assert [out[0]["generated_text"] for out in batched] == [
        pipe(p, max_new_tokens=5, do_sample=False)[0]["generated_text"] for p in prompts
    ]


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_conversion_is_exact_both_ways_and_pipelines_generate(tokenizer, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    described = make_tokenizer(tokenizer).describe()
    torch.manual_seed(0)
    vocab = described["vocab_size"]
    model = TransformerLM(ModelConfig(vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, tokenizer=described))
    model.save_pretrained(tmp_path / "native")
    code, out, _ = run(["convert", tmp_path / "native", "--to", "hf", "--out", tmp_path / "hf"], capsys)
    assert code == 0 and "wrote hf model" in out
    wrapper = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert isinstance(wrapper, TRAForCausalLM) and hf_tok.encode("Hello world") == make_tokenizer(tokenizer).encode(
        "Hello world"
    )
    special = {
        "bos_token_id": hf_tok.bos_token_id,
        "eos_token_id": hf_tok.eos_token_id,
        "pad_token_id": hf_tok.eos_token_id,
    }
    assert {name: getattr(wrapper.config, name) for name in special} == special  # what clients read
    assert hf_tok.pad_token_id is not None  # Hugging Face batches only with a pad token
    pipe = pipeline("text-generation", model=wrapper, tokenizer=hf_tok)
    prompts = ["It is a truth", "Emma"]
    for prompt, text in zip(prompts, pipe(prompts, max_new_tokens=6, do_sample=False, batch_size=2), strict=True):
        ids = torch.tensor([hf_tok.encode(prompt)])
        ours = model.generate(ids, 6, temperature=0)[0, ids.shape[1] :].tolist()
        if hf_tok.eos_token_id in ours:  # Hugging Face stops at the eos
            ours = ours[: ours.index(hf_tok.eos_token_id) + 1]
        assert text[0]["generated_text"] == prompt + make_tokenizer(tokenizer).decode(ours)
    assert run(["convert", tmp_path / "hf", "--to", "native", "--out", tmp_path / "back"], capsys)[0] == 0
    back = TransformerLM.from_pretrained(tmp_path / "back")
    assert back.config == model.config
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values(), strict=True))


@pytest.mark.parametrize("kind", sharing_kinds())
def test_parameters_shared_across_layers_save_once_and_load_tied_through_hugging_face(kind, tmp_path):
    """save_pretrained writes a shared parameter once (safetensors refuses tensors sharing memory); from_pretrained,
    whose loader gives the stored tensor to its one name, leaves every layer holding it (``tie_weights``), bit for
    bit; conversion both ways keeps them so."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model, wrapper = pair(kind)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    wrapper.model.load_state_dict(model.state_dict())
    aliases = model.shared_aliases()
    wrapper.save_pretrained(tmp_path / "hf")
    stored = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(stored) == sorted(f"model.{name}" for name in model.state_dict())
    model.save_pretrained(tmp_path / "native")
    to_hf(tmp_path / "native", tmp_path / "converted")
    to_native(tmp_path / "converted", tmp_path / "back")
    ids = torch.randint(0, 40, (2, 9))
    for folder in ("hf", "converted"):
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / folder).eval()
        assert isinstance(loaded, TRAForCausalLM) and loaded.model.shared_aliases() == aliases
        for alias, name in aliases.items():
            assert loaded.model.get_parameter(alias) is loaded.model.get_parameter(name)
        assert torch.equal(loaded(ids, use_cache=False).logits, model(ids))
    back = TransformerLM.from_pretrained(tmp_path / "back")
    assert back.shared_aliases() == aliases
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values(), strict=True))


def test_gpt2_tokenizer_equals_the_library_one():
    ours, theirs = make_tokenizer("gpt2"), hf_tokenizer("gpt2")
    text = "Hello world, café — naïve\n\n  x \t 1234567 's I'll 日本語 " * 20
    assert theirs.encode("Hello world") == [15496, 995] and theirs.encode(text) == ours.encode(text)
    assert theirs.decode(theirs.encode(text)) == text


def test_auto_classes_know_the_model_after_import_tra_attn_in_either_order(tmp_path):
    model, _ = pair("alibi")  # ALiBi's slopes are a non-persistent buffer that loading must restore
    model.save_pretrained(tmp_path / "native")
    to_hf(tmp_path / "native", tmp_path / "hf")
    torch.save(model(torch.arange(8)[None] % 40), tmp_path / "logits.pt")
    check = f"""
        import torch
        model = AutoModelForCausalLM.from_pretrained({str(tmp_path / "hf")!r})
        expected = torch.load({str(tmp_path / "logits.pt")!r})
        assert torch.equal(model(torch.arange(8)[None] % 40).logits, expected)
        print(type(model).__name__)
    """
    for imports in (
        "import tra_attn\nfrom transformers import AutoModelForCausalLM",
        "from transformers import AutoModelForCausalLM\nimport tra_attn",
    ):
        code = textwrap.dedent(imports + "\n" + textwrap.dedent(check))
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert result.returncode == 0 and "TRAForCausalLM" in result.stdout, result.stderr[-2000:]


def test_bad_input_gets_clear_errors_and_conversion_leaves_nothing_half_written(tmp_path, monkeypatch, capsys):
    _, wrapper = pair("tra")
    ids = torch.randint(0, 40, (2, 5))
    with pytest.raises(ValueError, match=r"TRAForCausalLM: attention_mask\.shape = \(2, 4\); expected \(B, S\) ="):
        wrapper(ids, attention_mask=torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"TransformerLM: attention_mask\[1\] has padding between real tokens"):
        wrapper(ids, attention_mask=torch.tensor([[1, 1, 1, 1, 1], [1, 0, 1, 1, 1]]))
    with pytest.raises(ValueError, match=r"ModelConfig\.attention = 'flash'; expected one of \['tra'"):
        TRAForCausalLM(TRAConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, attention="flash"))
    model = TransformerLM(ModelConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=2, tokenizer=BYTE))
    model.save_pretrained(tmp_path / "native")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        to_hf(tmp_path / "native", tmp_path / "taken")
    with pytest.raises(ValueError, match="has model_type = None; expected 'tra'"):
        to_native(tmp_path / "native", tmp_path / "out")
    with pytest.raises(ValueError, match="cannot read .*config.json"):
        to_native(tmp_path / "missing", tmp_path / "out")

    def broken(name):
        raise OSError("disk full")

    monkeypatch.setattr(convert_module, "hf_tokenizer", broken)
    with pytest.raises(OSError, match="disk full"):
        to_hf(tmp_path / "native", tmp_path / "half")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["native", "taken"]
    monkeypatch.setitem(sys.modules, "tra_attn.hf", None)  # as if transformers were not installed
    code, _, err = run(["convert", tmp_path / "native", "--to", "hf", "--out", tmp_path / "x"], capsys)
    assert code == 2 and "tra: error:" in err


def test_conversion_refuses_nonfinite_weights_both_ways(tmp_path, capsys):
    from tests.training.test_checkpoints import NONFINITE, overwrite_with_nan

    TransformerLM(ModelConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=2, tokenizer=BYTE)).save_pretrained(
        tmp_path / "native"
    )
    to_hf(tmp_path / "native", tmp_path / "hf")
    overwrite_with_nan(tmp_path / "hf")
    code, _, err = run(["convert", tmp_path / "hf", "--to", "native", "--out", tmp_path / "back"], capsys)
    assert code == 2 and re.search(r"convert: .*hf holds non-finite weights \(NaN or inf\) in blocks\.", err), err
    overwrite_with_nan(tmp_path / "native")
    code, _, err = run(["convert", tmp_path / "native", "--to", "hf", "--out", tmp_path / "hf2"], capsys)
    assert code == 2 and re.search(NONFINITE, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "native"]


def test_the_hugging_face_guide_example_runs(tmp_path, monkeypatch):
    """The README's Hugging Face section points to docs/huggingface.md, whose example loads a converted folder."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "[docs/huggingface.md](docs/huggingface.md)" in readme.split("## Hugging Face", 1)[1]
    guide = (Path(__file__).parents[2] / "docs" / "huggingface.md").read_text()
    block, retrofit, _ = re.findall(r"```python\n(.*?)```", guide, re.S)  # the third: test_retrofit.py runs it
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    TransformerLM(ModelConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=2, tokenizer=BYTE)).save_pretrained("lm")
    to_hf("lm", "my_model_hf")  # what the README's `tra convert` line makes
    exec(compile(block, "README.md", "exec"), {})
    from transformers import LlamaConfig, LlamaForCausalLM

    sizes = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    LlamaForCausalLM(LlamaConfig(**sizes)).save_pretrained("path/to/llama")  # the guide's own model
    names = {}
    exec(compile(retrofit, "docs/huggingface.md", "exec"), names)
    assert names["model"].config.tra["rope"] == "remove" and names["model"].config._attn_implementation == "tra"


def test_a_converted_folder_loads_without_importing_tra_attn_through_trust_remote_code(tmp_path):
    """The folder's auto_map names remote_code.py (the installed package's classes): a process that never
    imports tra_attn, as lm-eval's, loads model and tokenizer with trust_remote_code=True."""
    model = TransformerLM(ModelConfig(vocab_size=256, d_model=16, n_layers=1, n_heads=2, tokenizer=BYTE)).eval()
    model.save_pretrained(tmp_path / "native")
    to_hf(tmp_path / "native", tmp_path / "hf")
    torch.save(model(torch.arange(8)[None]), tmp_path / "logits.pt")
    code = f"""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        folder = {str(tmp_path / "hf")!r}
        try:
            AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=False)  # as lm-eval's default
        except ValueError as err:
            assert "trust_remote_code=True" in str(err), err
        else:
            raise AssertionError("loaded without trust_remote_code")
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        assert torch.equal(model(torch.arange(8)[None]).logits, torch.load({str(tmp_path / "logits.pt")!r}))
        assert tokenizer("a\\nb").input_ids == [97, 10, 98]
        from tra_attn.hf import TRAByteTokenizer, TRAForCausalLM  # already imported by remote_code.py

        print(isinstance(model, TRAForCausalLM), isinstance(tokenizer, TRAByteTokenizer))
    """
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home")}  # where transformers copies remote_code.py
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.splitlines()[-1].split()
    assert last == ["True", "True"], result.stdout


def test_the_byte_tokenizer_names_the_document_separator_as_bos_and_eos_yet_decodes_every_newline():
    tokenizer = hf_tokenizer("byte")
    assert tokenizer.bos_token_id == tokenizer.eos_token_id == make_tokenizer("byte").separator[0] == 10
    assert tokenizer.decode([97, 10, 98], skip_special_tokens=True) == "a\nb"
    assert tokenizer("a\nb").input_ids == [97, 10, 98]  # nothing added around a text


def test_the_byte_tokenizer_pads_with_an_id_the_model_never_emits_and_every_text_stays_its_bytes(tmp_path):
    tokenizer = hf_tokenizer("byte")
    assert tokenizer.pad_token == "<pad>" and tokenizer.pad_token_id == 256 and len(tokenizer) == 257
    batch = tokenizer(["abc", "d"], padding=True)
    assert batch.input_ids == [[97, 98, 99], [100, 256, 256]] and batch.attention_mask == [[1, 1, 1], [1, 0, 0]]
    assert tokenizer("a<pad>b").input_ids == list(b"a<pad>b")  # text is never read as the pad
    assert tokenizer.decode([97, 256, 10], skip_special_tokens=True) == "a\n"
    tokenizer.save_pretrained(tmp_path)
    again = type(tokenizer).from_pretrained(tmp_path)
    assert again.pad_token_id == 256 and again("x<pad>").input_ids == list(b"x<pad>")


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2", None])
def test_auto_tokenizer_refuses_a_folder_whose_tokenizer_files_were_deleted_unless_its_model_reads_bytes(
    tokenizer, tmp_path
):
    """AutoTokenizer falls back to the byte tokenizer for every model_type "tra" folder without tokenizer files:
    a GPT-2 model (or one without a tokenizer) read as bytes used to load silently."""
    from transformers import AutoTokenizer

    described = make_tokenizer(tokenizer).describe() if tokenizer else None
    vocab = described["vocab_size"] if described else 40
    model = TransformerLM(ModelConfig(vocab_size=vocab, d_model=16, n_layers=1, n_heads=2, tokenizer=described))
    model.save_pretrained(tmp_path / "native")
    to_hf(tmp_path / "native", tmp_path / "hf")
    for path in (tmp_path / "hf").iterdir():
        if path.name not in ("config.json", "model.safetensors", "generation_config.json", "remote_code.py"):
            path.unlink()
    if tokenizer == "byte":  # bytes need no files
        assert AutoTokenizer.from_pretrained(tmp_path / "hf")("ab").input_ids == [97, 98]
        return
    trained = "the 'gpt2' tokenizer" if tokenizer else "no tokenizer"
    with pytest.raises(ValueError, match=f"its model was trained with {trained}.*holds no tokenizer files"):
        AutoTokenizer.from_pretrained(tmp_path / "hf")


@pytest.mark.parametrize("change", ["int64", "missing"])
def test_auto_model_refuses_stored_tensors_transformers_would_cast_or_fill_in(change, tmp_path):
    """transformers casts an integer tensor to float, and fills a missing one with random values, with no error."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM

    TransformerLM(ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path / "lm")
    to_hf(tmp_path / "lm", tmp_path / "hf")
    weights = tmp_path / "hf" / "model.safetensors"
    state = load_file(str(weights))
    if change == "int64":
        state["model.norm.weight"] = state["model.norm.weight"].long()
        message = r"model\.norm\.weight is torch\.int64 of shape \(16,\); expected torch\.float32"
    else:
        del state["model.norm.weight"]
        message = r"missing: \['model\.norm\.weight'\]; unexpected: none"
    save_file(state, str(weights), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=message):
        AutoModelForCausalLM.from_pretrained(tmp_path / "hf")


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_a_model_that_draws_positions_at_evaluation_runs_hugging_faces_defaults(kind):
    """use_cache defaults to True in forward and generate: such a model decodes by full forwards instead, and each
    padded row computes and generates what it does alone."""
    torch.manual_seed(0)
    options = {"random_positions": 64, "random_positions_at_eval": True}
    config = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, attention=kind, attention_options=options)
    model = TransformerLM(config).eval()
    wrapper = TRAForCausalLM(TRAConfig.from_model_config(config)).eval()
    wrapper.model.load_state_dict(model.state_dict())
    with torch.no_grad():
        wrapper.model.lm_head.weight.mul_(20)
        model.lm_head.weight.mul_(20)
    ids = torch.randint(0, 40, (2, 9))
    assert torch.equal(wrapper(ids).logits, model(ids))
    assert torch.equal(wrapper.generate(ids, max_new_tokens=5, do_sample=False), model.generate(ids, 5, temperature=0))
    prompts = [[3, 1, 4, 1, 5, 9, 2], [6, 5], [3, 5, 8, 9]]
    batch, mask = padded(prompts, "left", pad=10_000)
    batched = wrapper.generate(batch, attention_mask=mask, max_new_tokens=5, do_sample=False)
    for row, p in enumerate(prompts):
        single = wrapper.generate(torch.tensor([p]), max_new_tokens=5, do_sample=False)[0]
        assert torch.equal(batched[row, batch.shape[1] - len(p) :], single), row
