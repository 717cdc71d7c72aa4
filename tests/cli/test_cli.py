"""The `tra` command end to end on tiny settings, and its answers to bad input (the refusals of bad command
lines: tests/cli/test_cli_validation.py)."""

from __future__ import annotations

import json
import re

import torch
from safetensors.torch import load_file

from tra_attn.cli import main
from tra_attn.utils.rows import read_rows, write_rows

TINY_TRAIN = [
    "--d-model",
    "16",
    "--n-layers",
    "1",
    "--n-heads",
    "2",
    "--length",
    "16",
    "--steps",
    "6",
    "--batch-size",
    "4",
    "--eval-every",
    "3",
    "--eval-sequences",
    "8",
    "--checkpoint-every",
    "3",
    "--no-progress",
]


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_data_then_eval_on_the_file(tmp_path, capsys):
    data = tmp_path / "ff.txt"
    code, out, _ = run(
        [
            "data",
            "flipflop",
            "--p-ignore",
            "0.9",
            "--length",
            "24",
            "--num",
            "30",
            "--seed",
            "1",
            "--final-read",
            "--out",
            data,
        ],
        capsys,
    )
    assert code == 0 and json.loads(out)["sequences"] == 30
    assert len(data.read_text().splitlines()) == 30
    code, _, _ = run(["train", "--out", tmp_path / "run", *TINY_TRAIN], capsys)
    assert code == 0
    rows_path = tmp_path / "rows.jsonl"
    code, out, _ = run(["eval", "--checkpoint", tmp_path / "run", "--data", data, "--out", rows_path], capsys)
    assert code == 0 and "ff" in out
    rows = read_rows(rows_path)
    assert {r["metric"] for r in rows} == {"full_seq_acc", "token_acc", "loss", "sequences", "scored_tokens"}
    assert all(r["split"] == "ff" and r["length"] == 24 and r["method"] == "tra" for r in rows)


def test_train_resume_and_eval_standard_splits(tmp_path, capsys):
    code, _, _ = run(["train", "--out", tmp_path, "--attention", "rope", *TINY_TRAIN], capsys)
    assert code == 0
    code, _, _ = run(["train", "--out", tmp_path, "--attention", "rope", "--resume", *TINY_TRAIN], capsys)
    assert code == 0
    code, out, _ = run(["eval", "--checkpoint", tmp_path, "--sequences", "16"], capsys)
    assert code == 0
    assert [line.split()[:2] for line in out.splitlines()[1:]] == [
        ["iid", "16"],
        ["sparse", "16"],
        ["dense", "16"],
        ["iid", "32"],
        ["iid", "64"],
        ["iid", "128"],
        ["sparse", "128"],
    ]


def test_flipflop_main_job_tiny_preset(tmp_path, capsys):
    out_dir = tmp_path / "ff"
    argv = [
        "flipflop",
        "--preset",
        "tiny",
        "--methods",
        "tra",
        "nope",
        "--seeds",
        "0",
        "1",
        "--out",
        out_dir,
        "--no-progress",
    ]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert re.search(r"^\| TRA( †)? \| 0.003 \| 2 \|", out, re.M) and re.search(r"^\| NoPE( †)? \|", out, re.M)
    rows = read_rows(out_dir / "results.jsonl")
    assert {(r["method"], r["seed"]) for r in rows} == {("tra", 0), ("tra", 1), ("nope", 0), ("nope", 1)}
    assert {"task", "split", "length", "method", "seed", "metric", "value", "config", "commit"} <= set(rows[0])
    assert (out_dir / "accuracy.png").stat().st_size > 1000
    # Finished runs are skipped: a second call trains nothing and reproduces the same rows.
    mtime = (out_dir / "runs/tra/lr0.003-seed0/eval.jsonl").stat().st_mtime
    assert run(argv, capsys)[0] == 0
    assert (out_dir / "runs/tra/lr0.003-seed0/eval.jsonl").stat().st_mtime == mtime
    assert read_rows(out_dir / "results.jsonl") == rows
    # A run evaluated before a test split existed is evaluated again from its final checkpoint.
    eval_path = out_dir / "runs/nope/lr0.003-seed1/eval.jsonl"
    stale = [r for r in read_rows(eval_path) if r["split"] != "sparse"]
    write_rows(eval_path, stale)
    assert run(argv, capsys)[0] == 0
    assert read_rows(eval_path) == [
        r for r in read_rows(out_dir / "results.jsonl") if r["method"] == "nope" and r["seed"] == 1
    ]
    assert sorted(map(json.dumps, read_rows(out_dir / "results.jsonl"))) == sorted(map(json.dumps, rows))
    notes = tmp_path / "notes.md"
    notes.write_text("TRA wins.")
    code, out, _ = run(["report", out_dir, "--notes", notes, "--markdown", tmp_path / "page.md"], capsys)
    page = (tmp_path / "page.md").read_text()
    assert code == 0 and "## Discussion" in out and "TRA wins." in page
    assert f"`tra report {out_dir} --notes {notes} --markdown {tmp_path / 'page.md'}`" in page


def test_flipflop_learning_rate_sweep_selects_on_validation(tmp_path, capsys):
    argv = [
        "flipflop",
        "--preset",
        "tiny",
        "--methods",
        "tra",
        "--lrs",
        "1e-4",
        "3e-3",
        "--out",
        tmp_path,
        "--no-progress",
    ]
    assert run(argv, capsys)[0] == 0
    selected = json.loads((tmp_path / "selected_lrs.json").read_text())
    sweep = read_rows(tmp_path / "sweep.jsonl")
    acc = {r["lr"]: r["value"] for r in sweep if r["split"] == "validation" and r["metric"] == "full_seq_acc"}
    best = max(acc, key=lambda lr: (acc[lr], -lr))
    assert selected == {"tra": best}
    assert {r["lr"] for r in read_rows(tmp_path / "results.jsonl")} == {best}
    assert "Learning-rate sweep" in (tmp_path / "results.md").read_text()


def test_eval_creates_the_folder_of_its_output_before_evaluating(tmp_path, capsys):
    run(["train", "--out", tmp_path / "run", *TINY_TRAIN], capsys)
    rows_path = tmp_path / "new" / "folder" / "rows.jsonl"
    code, _, _ = run(["eval", "--checkpoint", tmp_path / "run", "--sequences", "8", "--out", rows_path], capsys)
    assert code == 0 and {r["split"] for r in read_rows(rows_path)} == {"iid", "sparse", "dense"}


def test_eval_of_a_save_pretrained_model_needs_the_task_and_length(tmp_path, capsys):
    from tra_attn import ModelConfig, TransformerLM

    TransformerLM(ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path)
    code, _, err = run(["eval", "--checkpoint", tmp_path, "--sequences", "8"], capsys)
    assert code == 2 and "pass --task" in err
    code, _, err = run(["eval", "--checkpoint", tmp_path, "--sequences", "8", "--task", "flipflop"], capsys)
    assert code == 2 and "pass --length" in err
    argv = ["eval", "--checkpoint", tmp_path, "--sequences", "8", "--task", "flipflop", "--length", "16"]
    code, out, _ = run(argv, capsys)
    assert code == 0 and "sparse" in out


def test_a_diverging_train_exits_with_the_step_and_keeps_no_nonfinite_checkpoint(tmp_path, capsys):
    """lr 1e9 makes the loss NaN from step 2 (0.x went on and printed "trained", with NaN checkpoints)."""
    code, out, err = run(["train", "--out", tmp_path, *TINY_TRAIN, "--lr", "1e9", "--checkpoint-every", "1"], capsys)
    assert code == 2 and "trained" not in out
    assert re.search(r"^tra: error: training diverged at step 2: the loss or gradient norm is not finite", err, re.M)
    assert f"the last finite checkpoint is {tmp_path / 'checkpoints' / 'step_0000001'}" in err
    checkpoints = sorted((tmp_path / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["step_0000001"]
    assert all(torch.isfinite(t).all() for t in load_file(checkpoints[0] / "model.safetensors").values())
