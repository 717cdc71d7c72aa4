"""The passkey generator (key at its depth, answer, scored digits, lengths, seeds, the grid of splits, text format,
bad input) and its experiment (`tra data passkey`, a tiny `tra compare passkey` page with its grid, `tra report`)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tra_attn.cli import main
from tra_attn.data import make_task, split_sequences
from tra_attn.data.synthetic.passkey import DEPTHS, FILLER0, KEY_MARK, LENGTH_FACTORS, QUESTION, Passkey
from tra_attn.data.task import TEST_SEED
from tra_attn.experiments.engine import run_config
from tra_attn.experiments.methods import Method
from tra_attn.experiments.registry import experiments
from tra_attn.experiments.spec import Question
from tra_attn.experiments.store import Evidence

from ..questions import write_question


def reference(row: list[int], k: int) -> tuple[int, list[int], list[int]]:
    """Plain-Python semantics: (position of '#', the key after it, the answer after '?')."""
    mark, question = row.index(KEY_MARK), row.index(QUESTION)
    return mark, row[mark + 1 : mark + 1 + k], row[question + 1 :]


@pytest.mark.parametrize("k,depth,filler,length", [(5, None, "repeat", 64), (3, 0.5, "iid", 41), (1, 0.0, "iid", 5)])
def test_the_key_appears_once_and_the_answer_is_it(k, depth, filler, length):
    task = Passkey(key_digits=k, depth=depth, filler=filler)
    batch = task.sample(300, length, seed=1)
    assert batch.tokens.shape == (300, length) and int(batch.tokens.max()) < task.vocab_size
    for row, mask in zip(batch.tokens.tolist(), batch.loss_mask.tolist()):
        mark, key, answer = reference(row, k)
        assert row.count(KEY_MARK) == 1 and row.count(QUESTION) == 1 and row[-k - 1] == QUESTION
        assert answer == key and all(0 <= d <= 9 for d in key)
        assert sum(t < 10 for t in row) == 2 * k  # the key once in the context, once as the answer
        assert all(t >= FILLER0 for i, t in enumerate(row[: length - k - 1]) if not mark <= i <= mark + k)
        assert mask == [False] * (length - k) + [True] * k  # exactly the answer digits are scored


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.25, 0.5, 0.75, 1.0])
def test_the_key_sits_at_the_requested_depth(depth):
    task = Passkey(key_digits=4, depth=depth)
    for length in (14, 64, 301):
        filler = length - 2 * 4 - 2
        marks = (task.sample(20, length, seed=2).tokens == KEY_MARK).int().argmax(1)
        assert marks.tolist() == [math.floor(depth * filler + 0.5)] * 20
    assert Passkey(depth=0.0).sample(3, 30, 0).tokens[:, 0].tolist() == [KEY_MARK] * 3
    assert (Passkey(depth=1.0).sample(3, 30, 0).tokens[:, -12] == KEY_MARK).all()  # '#' 5 digits '?' 5 digits


def test_training_depths_are_uniform_over_every_place():
    batch = Passkey(key_digits=3).sample(6000, 20, seed=3)  # 12 filler tokens: 13 places
    counts = torch.bincount((batch.tokens == KEY_MARK).int().argmax(1), minlength=13).double() / 6000
    assert counts.numel() == 13 and (counts - 1 / 13).abs().max() < 0.02
    digits = batch.tokens[batch.loss_mask]
    assert ((torch.bincount(digits, minlength=10).double() / digits.numel()) - 0.1).abs().max() < 0.01


def test_repeat_filler_cycles_through_the_symbols_around_the_key():
    text = Passkey(key_digits=2, depth=0.5, num_filler=3).decode_text(
        Passkey(2, 0.5, num_filler=3).sample(1, 16, 0).tokens[0]
    )
    assert text[5] == "#" and text[:5] + text[8:13] == "abcabcabca"  # 10 filler tokens, the key block at 5
    iid = Passkey(key_digits=2, filler="iid", num_filler=3).sample(500, 40, 0).tokens
    symbols = iid[iid >= FILLER0] - FILLER0
    assert ((torch.bincount(symbols, minlength=3).double() / symbols.numel()) - 1 / 3).abs().max() < 0.02


def test_same_seed_same_sequences_and_depths_share_keys_and_filler():
    task = Passkey(filler="iid")
    assert torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 7).tokens)
    assert not torch.equal(task.sample(10, 64, 7).tokens, task.sample(10, 64, 8).tokens)
    shallow, deep = (
        Passkey(filler="iid", depth=0.0).sample(10, 64, 7),
        Passkey(filler="iid", depth=1.0).sample(10, 64, 7),
    )
    assert torch.equal(shallow.tokens[:, -5:], deep.tokens[:, -5:])  # the same keys
    assert torch.equal(shallow.tokens[:, 6:-6], deep.tokens[:, :-12])  # the same filler, the key moved


def test_statistics_report_depth_and_distance():
    stats = Passkey(key_digits=4, depth=0.25).statistics(Passkey(key_digits=4, depth=0.25).sample(8, 50, 0))
    assert stats["mean_depth"] == 10 / 40 and stats["mean_key_distance"] == 45 - 10 == stats["max_key_distance"]
    assert stats["key_digits"] == 4 and stats["filler_fraction"] == 40 / 50
    assert abs(Passkey().statistics(Passkey().sample(2000, 64, 0))["mean_depth"] - 0.5) < 0.02


def test_eval_splits_are_the_length_by_depth_grid():
    task = Passkey(key_digits=3, filler="iid")
    splits = task.eval_splits(32, 64)
    assert [(s.split, s.batch.tokens.shape[1]) for s in splits] == [
        (f"depth{d:g}", f * 32) for f in LENGTH_FACTORS for d in DEPTHS
    ]
    assert [s.split for s in splits[:5]] == ["depth0", "depth0.25", "depth0.5", "depth0.75", "depth1"]
    for s in splits:
        length = s.batch.tokens.shape[1]
        assert s.batch.tokens.shape[0] == split_sequences(64, 32, length)
        assert s.params == {"key_digits": 3, "depth": float(s.split[5:]), "filler": "iid", "num_filler": 8}
        assert task.statistics(s.batch)["mean_depth"] == pytest.approx(s.params["depth"], abs=0.5 / (length - 8))
    # Each length's depths come from the same seed, TEST_SEED + the length's index.
    assert torch.equal(splits[7].batch.tokens, Passkey(3, 0.5, "iid").sample(32, 64, TEST_SEED + 1).tokens)


def test_text_round_trip_and_what_is_read(tmp_path):
    task = Passkey(key_digits=3, filler="iid", num_filler=4)
    batch = task.sample(20, 30, seed=5)
    path = tmp_path / "passkey.txt"
    task.write_text(path, batch)
    lines = path.read_text().splitlines()
    assert len(lines) == 20 and all(len(line) == 30 for line in lines) and lines[0] == task.decode_text(batch.tokens[0])
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    tokens = task.encode_text("ab#472cd?472")
    assert tokens.tolist() == [FILLER0, FILLER0 + 1, KEY_MARK, 4, 7, 2, FILLER0 + 2, FILLER0 + 3, QUESTION, 4, 7, 2]
    assert task.loss_mask(tokens[None]).nonzero()[:, 1].tolist() == [9, 10, 11]


@pytest.mark.parametrize(
    "text,pattern",
    [
        ("ab#472ce?472", r"unknown characters \['e'\]; expected digits, '#', '\?' and the filler 'a'..'d'"),
        ("ab#472cd 472", r"unknown characters \[' '\]"),
        ("ab472cd?472", r"expected one '#' and then one '\?'"),
        ("ab#472#d?472", r"expected one '#' and then one '\?'"),
        ("ab?472cd#472", r"expected one '#' and then one '\?'"),
        ("ab#47cd?47", r"expected 3 digits after '#' and after '\?'"),
        ("ab#472cd?4721", r"expected 3 digits after '#' and after '\?'"),
        ("a1#472cd?472", r"and no other digit"),
        ("ab#472cd?", r"expected 3 digits after '#' and after '\?'"),
        ("ab#472cd?471", r"answers '471'; the key after '#' is '472'"),
    ],
)
def test_encode_rejects_malformed_lines(text, pattern):
    with pytest.raises(ValueError, match=r"passkey: (malformed )?sequence .*" + pattern):
        Passkey(key_digits=3, num_filler=4).encode_text(text)


def test_read_text_names_the_bad_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("ab#47c?47\nab#47c?74\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: passkey: sequence 'ab#47c\?74' answers '74'"):
        Passkey(key_digits=2).read_text(bad)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"key_digits": 0}, r"key_digits = 0; expected an integer >= 1"),
        ({"key_digits": 2.0}, r"key_digits = 2\.0; expected an integer >= 1"),
        ({"key_digits": True}, r"key_digits = True; expected an integer"),
        ({"depth": -0.1}, r"depth = -0\.1; expected None \(uniform\) or a fraction in \[0, 1\]"),
        ({"depth": 1.5}, r"depth = 1\.5; expected None \(uniform\) or a fraction in \[0, 1\]"),
        ({"depth": float("nan")}, r"depth = nan; expected None"),
        ({"depth": "0.5"}, r"depth = '0\.5'; expected None"),
        ({"depth": False}, r"depth = False; expected None"),
        ({"filler": "words"}, r"filler = 'words'; expected one of \['repeat', 'iid'\]"),
        ({"num_filler": 0}, r"num_filler = 0; expected an integer in \[1, 26\]"),
        ({"num_filler": 27}, r"num_filler = 27; expected an integer in \[1, 26\]"),
    ],
)
def test_bad_parameters(kwargs, pattern):
    with pytest.raises(ValueError, match=r"passkey: " + pattern):
        Passkey(**kwargs)


@pytest.mark.parametrize("length", [0, 12, 64.0, True])
def test_bad_length_and_num(length):
    # 5 key digits: '#' and the key, '?' and the answer, one filler token = 13 tokens.
    with pytest.raises(ValueError, match=r"passkey: length = .*expected an integer >= 13 \(key_digits = 5"):
        Passkey().sample(3, length, 0)
    assert Passkey().sample(1, 13, 0).loss_mask.sum() == 5
    with pytest.raises(ValueError, match=r"passkey: num = -1; expected a non-negative integer"):
        Passkey().sample(-1, 64, 0)
    with pytest.raises(ValueError, match=r"passkey: length = 8; expected an integer >= 13"):
        Passkey().eval_splits(8, 4)


def test_task_registry_and_presets():
    task = make_task("passkey", key_digits=4, depth=0.5)
    assert isinstance(task, Passkey) and task.vocab_size == 12 + 8
    with pytest.raises(ValueError, match=r"task 'passkey': unknown arguments \['digits'\]"):
        make_task("passkey", digits=4)
    experiment = experiments()["passkey"]
    assert experiment.task == "passkey" and set(experiment.presets) == {"cpu", "tiny"}
    for name, preset in experiment.presets.items():
        question = Question("x?", "passkey", (Method("tra"),), (0,), lrs=(1e-3,), lrs_source="a test", preset=name)
        config = run_config(experiment, question, Method("tra"), 1e-3, 0)
        assert config.fit_accuracy == 0.99 and config.task_args == preset.task_args
        config.task_instance().eval_splits(config.length, 1)  # every cell of the grid fits


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_tra_data_passkey_writes_and_reads_back(tmp_path, capsys):
    out = tmp_path / "pk.txt"
    argv = ["data", "passkey", "--key-digits", 3, "--depth", 0.25, "--filler", "iid", "--length", 40, "--num", 5]
    code, stdout, err = run([*argv, "--seed", 1, "--out", out], capsys)
    assert code == 0, err
    stats = json.loads(stdout)
    assert stats["sequences"] == 5 and stats["mean_depth"] == 8 / 32 and stats["key_digits"] == 3
    task = Passkey(key_digits=3, depth=0.25, filler="iid")
    (batch,) = task.read_text(out)
    assert torch.equal(batch.tokens, task.sample(5, 40, 1).tokens)
    code, _, err = run(["data", "passkey", "--depth", 2, "--length", 40, "--out", tmp_path / "x.txt"], capsys)
    assert code == 2 and "passkey: depth = 2.0; expected None (uniform) or a fraction in [0, 1]" in err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny question of two methods on passkey, its page and its runs' records."""
    root = tmp_path_factory.mktemp("passkey")
    folder = write_question(root, "passkey", lrs=(3e-3,))
    argv = ["run", folder, "--store", root / "store", "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    return folder


def tiny_rows(folder) -> list[dict]:
    """The rows of the tiny question's runs, by kind."""
    evidence = Evidence(folder.parent / "runs")
    return [
        {**r, "method": record.config["model"]["attention"]}
        for record in map(evidence.get, evidence.runs())
        for r in record.rows("sequences=16")
    ]


def test_a_tiny_question_writes_the_page_with_the_grid(tiny):
    rows = tiny_rows(tiny)
    tests = {(r["split"], r["length"]) for r in rows if r["split"] != "validation"}
    assert tests == {(f"depth{d:g}", f * 16) for f in LENGTH_FACTORS for d in DEPTHS}
    page = (tiny / "README.md").read_text()
    assert page.startswith("# Tiny: does the pipeline work on passkey?")
    lines = page.splitlines()
    header = lines[lines.index("## Exact match per length (mean over depths; mean ± std over seeds)") + 2]
    assert header.startswith("| method | lr | seeds | 1x (16) | 2x (32) | 4x (64) | 8x (128) | 16x (256) |")
    assert "## Exact match by length and depth (mean over seeds)" in page
    assert "Sequences per cell (each seed): 16 at 16 tokens, 8 at 32 tokens, 4 at 64 tokens" in page
    for method in ("TRA", "NoPE"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"**{method}"))
        assert lines[at + 2] == "| depth | 1x (16) | 2x (32) | 4x (64) | 8x (128) | 16x (256) |"
        assert [line.split(" |")[0] for line in lines[at + 4 : at + 9]] == ["| 0%", "| 25%", "| 50%", "| 75%", "| 100%"]
    assert "![exact match by length and depth](grid.png)" in page and (tiny / "grid.png").stat().st_size > 0
    assert "## Per-digit accuracy (mean over depths)" in page and "## Test data" in page


def test_the_grid_cells_are_the_rows_and_the_records_rebuild_the_page(tiny, capsys):
    rows = tiny_rows(tiny)
    page = (tiny / "README.md").read_text()
    value = next(
        r["value"]
        for r in rows
        if (r["method"], r["split"], r["length"], r["metric"]) == ("nope", "depth0.5", 64, "full_seq_acc")
    )
    lines = page.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("**NoPE"))
    assert lines[at + 6].split(" | ")[3] == f"{value:.2f}"  # depth 50%, 4x
    (tiny / "README.md").unlink()
    code, out, _ = run(["run", tiny, "--no-train", "--store", tiny.parent / "elsewhere"], capsys)
    assert code == 0 and (tiny / "README.md").read_text() == page
