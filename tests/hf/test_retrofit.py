"""The retrofit experiment (``tra retrofit``, ``experiments/retrofit``): transformers' RoPE scalings do what they say,
the continuation's recipe and schedule, the evaluation is the library's bits per byte, the tiny preset runs end to
end and writes a page with every row, a rerun trains and evaluates nothing, and bad input is refused by name; the
recipe of docs/huggingface.md runs."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

transformers = pytest.importorskip("transformers")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from tra_attn.cli import main  # noqa: E402
from tra_attn.experiments.retrofit.plan import base_recipe, chosen_rate, continue_recipe  # noqa: E402
from tra_attn.experiments.retrofit.presets import PRESETS, retrofit_preset  # noqa: E402
from tra_attn.experiments.retrofit.run import run_retrofit  # noqa: E402
from tra_attn.experiments.retrofit.scaling import rope_scaled  # noqa: E402
from tra_attn.experiments.retrofit.scoring import bits_per_byte  # noqa: E402
from tra_attn.experiments.retrofit.stages import STAGE_NAME  # noqa: E402
from tra_attn.experiments.retrofit.training import Recipe, train_causal_lm  # noqa: E402
from tra_attn.hf import add_attention  # noqa: E402
from tra_attn.training.optim import learning_rate  # noqa: E402

L = 16
ROWS = [
    "RoPE", "RoPE + linear", "RoPE + dynamic NTK", "RoPE + YaRN", "TRA, RoPE kept, +10%", "TRA, RoPE kept, +25%",
    "TRA (local_window=4, keep_surrogate=1), RoPE kept, +10%",
    "TRA (local_window=4, keep_surrogate=1), RoPE kept, +25%",
    "TRA, RoPE removed, +10%", "TRA, RoPE removed, +25%", "FoX, +10%", "FoX, +25%", "ALiBi, +10%", "ALiBi, +25%",
    "TRA from scratch",
]  # fmt: skip


def llama(vocab_size=50, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=L)  # fmt: skip
    return LlamaForCausalLM(config).eval()


def logits(model, x):
    with torch.no_grad():
        return model(x, use_cache=False).logits


@pytest.mark.parametrize(
    ("rope_type", "changes_1x"), [("linear", True), ("dynamic", False), ("yarn", True)]
)  # fmt: skip
def test_rope_scalings_are_applied_as_transformers_spells_them(rope_type, changes_1x):
    """At factor 2, linear and YaRN change the logits of a 1x input too; dynamic NTK only past the training length
    (a fresh model for each length: transformers keeps a grown base). At factor 1 linear and YaRN are the model."""
    model, x = llama(), torch.randint(0, 50, (2, 2 * L), generator=torch.Generator().manual_seed(1))
    scaled = rope_scaled(model, rope_type, 2, L)
    assert scaled.config.rope_parameters["rope_type"] == rope_type and scaled.config.rope_parameters["factor"] == 2
    assert torch.equal(logits(rope_scaled(model, rope_type, 2, L), x[:, :L]), logits(model, x[:, :L])) != changes_1x
    assert not torch.allclose(logits(scaled, x), logits(model, x))
    if rope_type != "dynamic":
        assert torch.equal(logits(rope_scaled(model, rope_type, 1, L), x), logits(model, x))
    assert torch.equal(scaled.model.embed_tokens.weight, model.model.embed_tokens.weight)  # the weights unchanged


def test_rope_scaling_refuses_what_it_cannot_scale():
    model = llama()
    with pytest.raises(ValueError, match=r"rope_type = 'ntk'; expected one of \['dynamic', 'linear', 'yarn'\]"):
        rope_scaled(model, "ntk", 2, L)
    with pytest.raises(ValueError, match=r"factor = 0.5; expected a number >= 1"):
        rope_scaled(model, "linear", 0.5, L)
    with pytest.raises(ValueError, match=r"has rope_parameters .*'linear'.*; expected an unscaled RoPE model"):
        rope_scaled(rope_scaled(model, "linear", 2, L), "yarn", 2, L)


def test_the_recipes_are_the_text_budget_and_a_fresh_schedule_for_the_continuation():
    cpu = PRESETS["cpu"]
    base = base_recipe(cpu, seed=3)
    assert (base.steps, base.batch_size, base.length, base.warmup_steps) == (600, 32, 128, 50)
    assert (base.lr, base.min_lr_ratio, base.weight_decay, base.seed) == (3e-3, 0.1, 0.1, 3)
    assert cpu.rate("tra") == 1e-3 and [cpu.continue_steps(f) for f in (0.10, 0.25)] == [60, 150]
    assert cpu.continue_lrs == (3e-4, 1e-3, 3e-3, 1e-2) and PRESETS["tiny"].continue_lrs == (1e-3, 3e-3)
    more = continue_recipe(cpu, 3, 60, 1e-3)
    assert (more.steps, more.lr, more.warmup_steps, more.first_step, more.min_lr_ratio) == (60, 1e-3, 10, 600, 0.1)
    rates = [learning_rate(more, step) for step in range(60)]
    assert rates[0] == pytest.approx(1e-4) and rates[9] == pytest.approx(1e-3) and max(rates) == rates[9]
    assert rates[-1] == pytest.approx(1e-4, rel=1e-2)  # the cosine reaches 0.1 of the peak at the last step
    assert [PRESETS["tiny"].continue_steps(f) for f in (0.10, 0.25)] == [1, 2]


def test_bits_per_byte_is_the_models_loss_over_every_next_token():
    model = llama(vocab_size=256)
    tokens = np.random.default_rng(0).integers(0, 256, 4 * L + 1)
    total = 0.0
    for start in range(0, 4 * L, L):
        window = torch.as_tensor(tokens[start : start + L + 1])[None]
        total += F.cross_entropy(logits(model, window[:, :-1])[0], window[0, 1:], reduction="sum").item()
    expected = total / math.log(2) / (4 * L)  # one byte per token
    assert bits_per_byte(model, tokens, L, np.ones(256, dtype=np.int64)) == pytest.approx(expected, rel=1e-6)
    for factor in (2, 4):  # a converted model at longer windows too
        converted = add_attention(llama(vocab_size=256), "fox", rope="remove")
        assert math.isfinite(bits_per_byte(converted, tokens, factor * L, np.ones(256, dtype=np.int64)))


def test_training_changes_the_weights_and_refuses_bad_recipes():
    model = llama(vocab_size=256)
    before = model.model.layers[0].self_attn.q_proj.weight.clone()
    tokens = np.random.default_rng(0).integers(0, 256, 10 * L)
    info = train_causal_lm(model, tokens, Recipe(steps=2, lr=1e-3, batch_size=2, length=L))
    assert not torch.equal(before, model.model.layers[0].self_attn.q_proj.weight) and not model.training
    assert set(info) == {"train_seconds", "final_loss"} and math.isfinite(info["final_loss"])
    with pytest.raises(ValueError, match=r"train_causal_lm: 10 tokens; expected at least length \+ 1 = 17"):
        train_causal_lm(model, tokens[:10], Recipe(steps=1, lr=1e-3, length=L))
    with pytest.raises(ValueError, match=r"Recipe.steps = 0; expected a positive integer"):
        Recipe(steps=0, lr=1e-3)
    with pytest.raises(ValueError, match=r"Recipe.lr = -1; expected a positive number"):
        Recipe(steps=1, lr=-1)


def table_rows(page: str, section: str = "## Bits per byte") -> dict[str, list[str]]:
    """The rows of the table in ``section``, by their first cell."""
    text = page.split(section, 1)[1].split("\n## ", 1)[0]
    tables = [[cell.strip() for cell in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("|")]
    return {cells[0]: cells[1:] for cells in tables[2:]}


def test_a_continuations_rate_is_chosen_on_validation_tokens_before_the_scored_ones():
    """The lowest selection value wins, a tie goes to the smaller rate; the selection tokens are the as many before
    the scored ones, and a text too short for both is refused."""
    assert chosen_rate({3e-3: 2.0, 1e-3: 2.1}) == 3e-3 and chosen_rate({3e-3: 2.0, 1e-3: 2.0}) == 1e-3
    tokens = np.arange(5000)
    selection, scored = PRESETS["tiny"].split_validation(tokens)
    assert list(scored) == list(range(5000 - 1024, 5000)) and list(selection) == list(range(5000 - 2048, 5000 - 1024))
    with pytest.raises(ValueError, match=r"retrofit: 2047 validation tokens; expected at least 2 x 1024"):
        PRESETS["tiny"].split_validation(tokens[:2047])
    with pytest.raises(ValueError, match=r"continue_lrs = \(\); expected distinct positive rates"):
        dataclasses.replace(PRESETS["tiny"], continue_lrs=())


def test_the_tiny_preset_runs_end_to_end_and_a_rerun_skips_every_finished_stage(tmp_path, capsys):
    out, cache = tmp_path / "page", tmp_path / "cache"
    argv = ["retrofit", "--preset", "tiny", "--out", str(out), "--cache", str(cache), "--seed", "1"]
    assert main(argv) == 0
    page = (out / "README.md").read_text()
    assert f"Command: `tra {' '.join(argv)}`" in page and (out / "bits_per_byte.png").stat().st_size > 0
    assert re.search(r"^Machine: .+ CPU thread\(s\); torch .+, transformers 5\.", page, re.M)
    assert re.search(r"^Date: \d{4}-\d\d-\d\d, commit \S+", page, re.M) and "Seed: 1 (one seed" in page
    rows = table_rows(page)
    assert list(rows) == ROWS and all(len(cells) == 9 for cells in rows.values())
    assert all(math.isfinite(float(v)) for cells in rows.values() for v in cells[2:8])
    assert rows["RoPE + YaRN"][2] == rows["RoPE"][2]  # at 1x the factor is 1: the base itself
    sweep = table_rows(page, "## Continuation rates")
    assert list(sweep) == ROWS[4:14] and all(len(cells) == 3 for cells in sweep.values())
    for label, (low, high, chosen) in sweep.items():  # the row shows the rate its sweep chose
        assert chosen == ("0.001" if float(low) <= float(high) else "0.003") and rows[label][1] == chosen
    stages = sorted(p for p in cache.iterdir() if p.is_dir())
    assert len(stages) == 22 and all((p / STAGE_NAME).is_file() and (p / "model.safetensors").is_file() for p in stages)
    assert "wrote" in capsys.readouterr().out

    said = []
    again, reran = run_retrofit("tiny", out, cache, seed=1, command="tra " + " ".join(argv), say=said.append)
    assert reran.computed == [] and len(reran.reused) == 20 + len(ROWS) + 12  # selections, evaluations, shown stages
    assert table_rows(again.read_text()) == rows
    assert sorted(p for p in cache.iterdir() if p.is_dir()) == stages
    assert all("trained already" in line for line in said)


def test_bad_input_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"retrofit: preset = 'big'; expected one of \['cpu', 'tiny'\]"):
        retrofit_preset("big")
    with pytest.raises(SystemExit):
        main(["retrofit", "--preset", "big", "--out", str(tmp_path)])
    assert "invalid choice: 'big'" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["retrofit", "--preset", "tiny", "--out", str(tmp_path / "file"), "--cache", str(tmp_path)]) == 2
    assert "tra: error:" in capsys.readouterr().err
    cache_file = ["--cache", str(tmp_path / "file")]
    assert main(["retrofit", "--preset", "tiny", "--out", str(tmp_path / "out"), *cache_file]) == 2
    assert f"--cache {tmp_path / 'file'} is a file" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before the page's folder is made
    with pytest.raises(SystemExit):
        main(["retrofit", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "10% and 25% of the budget" in shown and "%%" not in shown


def test_the_retrofit_recipe_of_the_guide_runs(tmp_path, monkeypatch):
    guide = (Path(__file__).parents[2] / "docs" / "huggingface.md").read_text()
    (recipe,) = [b for b in re.findall(r"```python\n(.*?)```", guide, re.S) if "train_causal_lm" in b]
    monkeypatch.chdir(tmp_path)
    llama(vocab_size=256).save_pretrained("path/to/byte_llama")
    quick = recipe.replace("steps=150", "steps=2").replace("batch_size=32", "batch_size=2")
    quick = quick.replace("[-65536:]", "[-4097:]")
    assert quick.count("steps=2") == 1 and "[-4097:]" in quick
    names = {}
    exec(compile(quick, "docs/huggingface.md", "exec"), names)
    assert names["model"].config.tra["rope"] == "remove" and Path("byte_llama_tra/model.safetensors").is_file()
