"""Language modelling through the harness: perplexity against a hand computation, training with exact
resume, evaluation at 1x-16x the training length, and clear errors."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import re
import shutil

import pytest
import torch
import torch.nn.functional as F

from tests.cli.test_cli import run
from tra_attn import ModelConfig, TransformerLM
from tra_attn.data import make_task
from tra_attn.experiments.parameters import parameter_count
from tra_attn.metrics import lm_metrics
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import resolve_checkpoint

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune. " * 40


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "train.txt").write_text(TEXT + "Émma, café — naïve.\n")
    (tmp_path / "valid.txt").write_text(TEXT[::-1][:2000])
    return {"corpus": str(tmp_path / "train.txt"), "validation_text": str(tmp_path / "valid.txt")}


def lm_config(task_args, **overrides) -> TrainConfig:
    tokenizer = make_task("lm", **task_args).tokenizer_description()
    model = ModelConfig(
        vocab_size=256, d_model=32, n_layers=1, n_heads=2, attention="tra", dropout=0.1, tokenizer=tokenizer
    )
    base = dict(task="lm", task_args=task_args, model=model, length=16, steps=6, batch_size=4, lr=3e-3)
    base.update(log_every=1, eval_every=3, eval_sequences=4, checkpoint_every=3)
    return TrainConfig(**{**base, **overrides})


def test_perplexity_and_bits_per_byte_match_a_hand_computation():
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2)).eval()
    tokens = torch.randint(0, 11, (3, 9))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False
    mask[1, 4:] = False  # a partly scored window
    token_bytes = torch.arange(11) % 3 + 1  # ids stand for 1, 2 or 3 bytes
    logits = model(tokens[:, :-1]).double()
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")[mask[:, 1:]]
    scored_bytes = token_bytes[tokens[:, 1:][mask[:, 1:]]].sum().item()
    got = lm_metrics(model, tokens, mask, token_bytes.numpy())
    assert got["scored_tokens"] == int(mask.sum()) == losses.numel()
    assert got["loss"] == pytest.approx(losses.mean().item(), rel=1e-6)
    assert got["perplexity"] == pytest.approx(math.exp(losses.mean().item()), rel=1e-6)
    assert got["bits_per_byte"] == pytest.approx(losses.sum().item() / math.log(2) / scored_bytes, rel=1e-6)


def test_windows_are_corpus_tokens_and_validation_is_fixed(corpus):
    task = make_task("lm", **corpus)
    batch = task.sample(4, 16, seed=7)
    assert batch.tokens.shape == (4, 17) and not batch.loss_mask[:, 0].any() and batch.loss_mask[:, 1:].all()
    train_bytes = (TEXT + "Émma, café — naïve.\n").encode()
    for row in batch.tokens:
        assert bytes(row.tolist()) in train_bytes
    assert torch.equal(task.sample(4, 16, seed=7).tokens, batch.tokens)
    assert not torch.equal(task.sample(4, 16, seed=8).tokens, batch.tokens)
    first, second = task.validation(3, 16, seed=0), task.validation(3, 16, seed=99)
    assert torch.equal(first.tokens, second.tokens) and first.tokens[1, 0] == first.tokens[0, -1]


def test_training_resumes_exactly_and_validates_with_perplexity(corpus, tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(lm_config(corpus), straight, progress=False)
    train(lm_config(corpus), resumed, progress=False)
    shutil.rmtree(resumed / "checkpoints" / "step_0000006")
    train(lm_config(corpus), resumed, resume=True, progress=False)
    a = TransformerLM.from_pretrained(resolve_checkpoint(straight)).state_dict()
    b = TransformerLM.from_pretrained(resolve_checkpoint(resumed)).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)
    rows = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    validation = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in validation] == [3, 6]
    assert {"val_perplexity", "val_bits_per_byte", "val_scored_tokens"} <= set(validation[0])
    assert validation[0]["val_scored_tokens"] == 4 * 16


def test_lm_train_command_maps_its_corpus_flags_and_resumes_exactly(corpus, tmp_path, capsys):
    flags = ["--corpus", corpus["corpus"], "--validation-text", corpus["validation_text"], "--tokenizer", "byte"]
    flags += ["--length", "16", "--steps", "6", "--batch-size", "4", "--d-model", "16", "--n-layers", "1"]
    flags += ["--n-heads", "2", "--dropout", "0.1", "--checkpoint-every", "3", "--eval-every", "3"]
    flags += ["--eval-sequences", "4", "--no-progress"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert run(["train", "--task", "lm", "--out", str(straight), *flags], capsys)[0] == 0
    saved = json.loads((straight / "train_config.json").read_text())
    assert saved["task"] == "lm" and saved["task_args"] == {**corpus, "tokenizer": "byte"}
    assert saved["model"]["tokenizer"]["name"] == "byte" and saved["model"]["vocab_size"] == 256
    assert run(["train", "--task", "lm", "--out", str(resumed), *flags], capsys)[0] == 0
    shutil.rmtree(resumed / "checkpoints" / "step_0000006")
    assert run(["train", "--task", "lm", "--out", str(resumed), "--resume", *flags], capsys)[0] == 0
    a = TransformerLM.from_pretrained(resolve_checkpoint(straight)).state_dict()
    b = TransformerLM.from_pretrained(resolve_checkpoint(resumed)).state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)
    code, _, err = run(["train", "--task", "lm", "--out", str(tmp_path / "bad"), "--corpus", corpus["corpus"]], capsys)
    assert code == 2 and "validation_text = None; expected validation_text=PATH" in err


def test_eval_scores_the_same_tokens_at_1x_to_16x_the_training_length(corpus, tmp_path, capsys):
    train(lm_config(corpus, length=8), tmp_path / "run", progress=False)
    code, out, err = run(
        ["eval", "--checkpoint", tmp_path / "run", "--sequences", "16", "--out", tmp_path / "r.jsonl"], capsys
    )
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    lengths = sorted({r["length"] for r in rows})
    assert lengths == [8, 16, 32, 64, 128]
    scored = {r["length"]: r["value"] for r in rows if r["metric"] == "scored_tokens"}
    assert set(scored.values()) == {128}  # the same 16 x 8 validation tokens at every length
    assert all(r["task"] == "lm" and r["split"] == "validation" for r in rows)
    assert "bits_per_byte" in out.splitlines()[0]


@pytest.mark.parametrize(
    "task_args,pattern",
    [
        ({"corpus": "novel.txt"}, r"lm: corpus = 'novel\.txt' is a path, and validation_text = None; expected"),
        ({"tokenizer": "sentencepiece"}, r"lm: tokenizer = 'sentencepiece'; expected one of \['byte', 'gpt2'\]"),
        ({"corpus": ""}, r"lm: corpus = ''; expected a benchmark name or a path"),
        ({"data_dir": 3}, r"lm: data_dir = 3; expected a path"),
        ({"shuffle": True}, r"task 'lm': unknown arguments \['shuffle'\]"),
    ],
)
def test_bad_task_arguments(task_args, pattern):
    with pytest.raises(ValueError, match=pattern):
        make_task("lm", **task_args)


def test_bad_corpora_and_lengths(corpus, tmp_path):
    with pytest.raises(
        ValueError, match=r"ModelConfig\.tokenizer = .*'gpt2'.*expected a tokenizer of at most vocab_size = 256"
    ):
        lm_config({**corpus, "tokenizer": "gpt2"})
    model = ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=2)
    with pytest.raises(ValueError, match=r"ModelConfig\.tokenizer = None; expected the lm task's \{'name': 'byte'"):
        TrainConfig(task="lm", task_args=corpus, model=model)
    missing = {**corpus, "corpus": str(tmp_path / "nowhere.txt")}
    with pytest.raises(ValueError, match=r"nowhere\.txt"):
        make_task("lm", **missing).sample(2, 8, seed=0)
    with pytest.raises(ValueError, match=r"lm: length = 4096 needs 4097 validation tokens; the validation text has"):
        make_task("lm", **corpus).validation(2, 4096, seed=0)


def test_the_lm_task_has_no_line_format(corpus, tmp_path, capsys):
    train(lm_config(corpus, steps=1, eval_every=0), tmp_path / "run", progress=False)
    (tmp_path / "lines.txt").write_text("hello\n")
    code, _, err = run(["eval", "--checkpoint", tmp_path / "run", "--data", tmp_path / "lines.txt"], capsys)
    assert code == 2 and "the lm task has no one-sequence-per-line format" in err
    with pytest.raises(SystemExit):
        run(["data", "lm", "--out", tmp_path / "x.txt"], capsys)


def test_a_saved_language_model_samples_text_with_its_own_tokenizer(corpus, tmp_path, capsys):
    """save_pretrained keeps the tokenizer in config.json, so sampling needs nothing but the directory."""
    from tra_attn.experiments.lm.sample import sample_text

    checkpoint = train(lm_config(corpus, steps=2, eval_every=0), tmp_path / "run", progress=False)
    TransformerLM.from_pretrained(checkpoint).save_pretrained(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["tokenizer"]["name"] == "byte"
    greedy = sample_text(tmp_path / "saved", "a truth", max_new_tokens=12, temperature=0)
    assert len(greedy.encode("utf-8", errors="surrogateescape")) <= 12 * 3  # 12 byte ids, some maybe U+FFFD
    assert sample_text(tmp_path / "run", "a truth", max_new_tokens=12, temperature=0) == greedy
    code, out, _ = run(
        ["lm", "sample", "--checkpoint", tmp_path / "saved", "--prompt", "a truth", "--max-new-tokens", "5"], capsys
    )
    assert code == 0 and out.startswith("a truth")


def test_sampling_refuses_models_without_or_with_a_different_tokenizer(corpus, tmp_path, monkeypatch, capsys):
    from tra_attn.data.text import ByteTokenizer

    TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path / "ff")
    code, _, err = run(["lm", "sample", "--checkpoint", tmp_path / "ff", "--prompt", "w1"], capsys)
    assert code == 2 and "the model has no text tokenizer (it reads a task vocabulary)" in err
    train(lm_config(corpus, steps=1, eval_every=0), tmp_path / "run", progress=False)
    code, _, err = run(["lm", "sample", "--checkpoint", tmp_path / "run", "--prompt", ""], capsys)
    assert code == 2 and "--prompt = ''; expected text of at least one token" in err
    described = ByteTokenizer().describe()
    monkeypatch.setattr(ByteTokenizer, "describe", lambda self: {**described, "separator": [0]})
    code, _, err = run(["lm", "sample", "--checkpoint", tmp_path / "run", "--prompt", "a"], capsys)
    assert code == 2 and "expected the one the model was trained with" in err


def test_lm_eval_scores_every_token_once_at_every_length_and_window_kind(corpus, tmp_path, capsys):
    from tra_attn.experiments.lm.evaluate import evaluate_lm

    train(lm_config(corpus, length=8, steps=2, eval_every=0), tmp_path / "run", progress=False)
    rows = evaluate_lm(tmp_path / "run", factors=[1, 2, 4], stride=8, tokens=301, buckets=4)
    table = {}
    for r in rows:
        table.setdefault((r["split"], r["length"]), {})[r["metric"]] = r["value"]
    assert set(table) == {(s, n) for s in ("non_overlapping", "sliding") for n in (8, 16, 32)}
    assert {m["scored_tokens"] for m in table.values()} == {300}  # every token after the first, once
    assert table[("sliding", 8)]["loss"] == pytest.approx(table[("non_overlapping", 8)]["loss"], rel=1e-12)
    assert [k for k in table[("non_overlapping", 32)] if k.startswith("loss@")] == [
        "loss@0-8",
        "loss@8-16",
        "loss@16-24",
        "loss@24-32",
    ]
    assert all(m["peak_memory_mb"] > 0 for m in table.values())
    code, out, _ = run(
        [
            "lm",
            "eval",
            "--checkpoint",
            tmp_path / "run",
            "--factors",
            "1",
            "2",
            "--tokens",
            "100",
            "--out",
            tmp_path / "rows.jsonl",
        ],
        capsys,
    )
    assert code == 0 and len(out.splitlines()) == 4 and (tmp_path / "rows.jsonl").is_file()  # header, 2 rows, span


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--factors", "64"], r"windows of 512 tokens need 513 tokens; the scored text has 300"),
        (["--stride", "9"], r"--stride = 9; expected an integer in \[1, training length = 8\]"),
        (["--stride", "0"], r"--stride = 0; expected an integer in \[1, training length = 8\]"),
        (["--factors", "0"], r"--factors = \[0\]; expected positive integers"),
        (["--buckets", "0"], r"--buckets = 0; expected a positive integer"),
        (["--tokens", "1"], r"--tokens = 1; expected at least 2"),
        (["--device", "npu"], r"device = 'npu'; expected 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_bad_lm_eval_arguments(corpus, tmp_path, capsys, argv, pattern):
    train(lm_config(corpus, length=8, steps=1, eval_every=0), tmp_path / "run", progress=False)
    try:
        code, _, err = run(["lm", "eval", "--checkpoint", tmp_path / "run", "--tokens", "300", *argv], capsys)
    except SystemExit as stop:  # refused by the parser itself
        code, err = stop.code, capsys.readouterr().err
    assert code == 2 and re.search(pattern, err), err


def test_lm_eval_refuses_models_it_cannot_place(tmp_path, capsys):
    from tra_attn.training import TrainConfig as Config

    TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path / "saved")
    code, _, err = run(["lm", "eval", "--checkpoint", tmp_path / "saved"], capsys)
    assert code == 2 and "has no training config, so no validation text; expected --text FILE (and --length)" in err
    (tmp_path / "text.txt").write_text("some text\n")
    code, _, err = run(["lm", "eval", "--checkpoint", tmp_path / "saved", "--text", tmp_path / "text.txt"], capsys)
    assert code == 2 and "has no training config to take the training length from; pass --length" in err
    argv = ["lm", "eval", "--checkpoint", tmp_path / "saved", "--text", tmp_path / "text.txt", "--length", "4"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "the model has no text tokenizer (it reads a task vocabulary)" in err
    ff = Config(task="flipflop", model=ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2), length=8, steps=1)
    train(ff, tmp_path / "ff", progress=False)
    code, _, err = run(["lm", "eval", "--checkpoint", tmp_path / "ff"], capsys)
    assert code == 2 and "a model of task 'flipflop'; expected one trained with --task lm" in err


def test_a_text_question_selects_learning_rates_on_validation_and_reports(tmp_path, capsys, monkeypatch):
    """The tiny preset end to end on the Austen benchmark shipped with the package."""
    from tra_attn.experiments.store import Evidence

    from ..questions import write_question

    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    folder = write_question(tmp_path, "lm", kinds=("tra", "rope"))
    code, out, err = run(["run", folder, "--store", tmp_path / "store", "--no-progress"], capsys)
    assert code == 0, err
    evidence = Evidence(folder.parent / "runs")
    records = [evidence.get(r) for r in evidence.runs()]
    page = (folder / "README.md").read_text()
    for kind, label in (("tra", "TRA"), ("rope", "RoPE")):
        val = {
            r.config["lr"]: v["value"]
            for r in records
            if r.config["model"]["attention"] == kind
            for v in r.validation
            if v["metric"] == "bits_per_byte"
        }
        best = min(val, key=lambda lr: (val[lr], lr))
        config = next(r.config for r in records if r.config["model"]["attention"] == kind)
        rate = f"{best:g} (chosen from 0.001, 0.003 on seed 0; at an edge)"
        assert f"| {label} | `{kind}` | nothing | {parameter_count(config):,} | {rate} |" in page
    lengths = {r["length"] for rec in records for r in rec.rows("tokens=1024") if r["split"] == "non_overlapping"}
    assert lengths == {16, 32, 64, 128, 256}
    assert "| TRA |" in page and "16x / 1x" in page and (folder / "bits_per_byte.png").stat().st_size > 0


def rows_table(rows) -> dict:
    """{(split, length): {metric: value}} of result rows."""
    table: dict = {}
    for r in rows:
        table.setdefault((r["split"], r["length"]), {})[r["metric"]] = r["value"]
    return table


def test_lm_eval_on_any_text_and_any_saved_form_of_the_model(corpus, tmp_path, capsys):
    """--text scores a file, a .gz file or a folder with the model's own tokenizer: on the run's validation text
    it gives the run's numbers exactly, for the run, its save_pretrained folder and (with transformers) its
    Hugging Face folder; --offset/--tokens pick the span, scored at every length."""
    from tra_attn.experiments.lm.evaluate import evaluate_lm

    train(lm_config(corpus, length=8, steps=2, eval_every=0), tmp_path / "run", progress=False)
    TransformerLM.from_pretrained(resolve_checkpoint(tmp_path / "run")).save_pretrained(tmp_path / "saved")
    valid = tmp_path / "valid.txt"
    with gzip.open(tmp_path / "valid.txt.gz", "wb") as f:
        f.write(valid.read_bytes())
    (tmp_path / "folder").mkdir()
    shutil.copy(valid, tmp_path / "folder" / "valid.txt")
    common = dict(factors=[1, 4], stride=4, tokens=201, offset=50, buckets=2)
    reference = rows_table(evaluate_lm(tmp_path / "run", **common))
    assert {m["scored_tokens"] for m in reference.values()} == {200}  # the same 200 tokens at every length
    sources = [(tmp_path / "run", {}), (tmp_path / "saved", {"length": 8})]
    if importlib.util.find_spec("transformers") is not None:
        from tra_attn.hf import to_hf

        sources.append((to_hf(tmp_path / "run", tmp_path / "hf"), {"length": 8}))
    for model, extra in sources:
        for text in (valid, tmp_path / "valid.txt.gz", tmp_path / "folder"):
            rows = evaluate_lm(model, text=text, **common, **extra)
            assert rows_table(rows) == {
                k: {**m, "peak_memory_mb": pytest.approx(m["peak_memory_mb"], rel=1)} for k, m in reference.items()
            }
            assert {r["text"] for r in rows} == {str(text)} and {tuple(r["span"]) for r in rows} == {(50, 251)}
    last = rows_table(evaluate_lm(tmp_path / "run", text=valid, factors=[1], tokens=101))
    assert last[("non_overlapping", 8)]["scored_tokens"] == 100  # without --offset: the last --tokens
    code, out, err = run(
        [
            "eval",
            "--checkpoint",
            tmp_path / "saved",
            "--text",
            valid,
            "--length",
            "8",
            "--out",
            tmp_path / "rows.jsonl",
        ],
        capsys,
    )
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert {r["length"] for r in rows} == {8, 16, 32, 64, 128} and "bpb" in out.splitlines()[0]


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["--offset", "2000"], r"--offset = 2000; expected an integer in \[0, 2000\) \(the text has 2000 tokens\)"),
        (["--offset", "-1"], r"--offset = -1; expected an integer in \[0, 2000\)"),
        (
            ["--offset", "1950", "--tokens", "51"],
            r"--offset 1950 \+ --tokens 51 = 2001; expected at most the text's 2000",
        ),
        (["--offset", "1900", "--factors", "16"], r"windows of 128 tokens need 129 tokens; the scored text has 100"),
        (["--length", "0"], r"--length = 0; expected a positive number of tokens"),
        # one rule for --tokens and --offset: the span lies inside the text (--tokens beyond it used to score the
        # whole text without a word)
        (["--tokens", "2001"], r"--tokens = 2001; expected at most the text's 2000 tokens \(the scored span must"),
    ],
)
def test_bad_lm_eval_spans(corpus, tmp_path, capsys, argv, pattern):
    train(lm_config(corpus, length=8, steps=1, eval_every=0), tmp_path / "run", progress=False)
    code, _, err = run(
        [
            "lm",
            "eval",
            "--checkpoint",
            tmp_path / "run",
            "--text",
            corpus["validation_text"],
            *argv,
            "--out",
            tmp_path / "out" / "rows.jsonl",
        ],
        capsys,
    )
    assert code == 2 and re.search(pattern, err), err
    assert not (tmp_path / "out").exists()


def test_lm_commands_fail_on_missing_data_before_creating_any_output(corpus, tmp_path, capsys):
    missing = tmp_path / "missing.txt"
    flags = ["--length", "8", "--steps", "1", "--d-model", "16", "--n-layers", "1", "--n-heads", "2"]
    code, _, err = run(
        [
            "train",
            "--task",
            "lm",
            "--out",
            tmp_path / "a",
            "--corpus",
            missing,
            "--validation-text",
            corpus["validation_text"],
            *flags,
        ],
        capsys,
    )
    assert code == 2 and f"corpus path {missing} does not exist" in err
    code, _, err = run(
        [
            "train",
            "--task",
            "lm",
            "--out",
            tmp_path / "b",
            "--corpus",
            "austen",
            "--data-dir",
            tmp_path / "nowhere",
            *flags,
        ],  # fmt: skip
        capsys,
    )
    assert code == 2 and "austen: --data-dir" in err and "is not a folder" in err
    train(lm_config(corpus, length=8, steps=1, eval_every=0), tmp_path / "run", progress=False)
    for command in (["lm", "eval"], ["eval"]):
        code, _, err = run(
            [*command, "--checkpoint", tmp_path / "run", "--text", missing, "--out", tmp_path / "d" / "rows.jsonl"],
            capsys,
        )
        assert code == 2 and f"corpus path {missing} does not exist" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "run", "train.txt", "valid.txt"]


def test_lm_eval_states_the_span_it_scored(corpus, tmp_path, capsys):
    train(lm_config(corpus, length=8, steps=1, eval_every=0), tmp_path / "run", progress=False)
    argv = ["lm", "eval", "--checkpoint", tmp_path / "run", "--text", corpus["validation_text"], "--factors", "1"]
    for flags, line in (
        (["--tokens", "300"], "scored tokens 1700..2000 of the text's 2000"),
        (["--tokens", "100", "--offset", "5"], "scored tokens 5..105 of the text's 2000"),
        ([], "scored tokens 0..2000 of the text's 2000 (the whole text)"),
    ):
        code, out, err = run([*argv, *flags], capsys)
        assert code == 0 and out.splitlines()[-1] == line, (flags, out, err)
