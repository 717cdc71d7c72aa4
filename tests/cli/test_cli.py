"""The `tra` command end to end on tiny settings, and its answers to bad input (the refusals of bad command
lines: tests/cli/test_cli_validation.py)."""

from __future__ import annotations

import json
import re

import torch
from safetensors.torch import load_file

from tra_attn.cli import main
from tra_attn.utils.rows import read_rows

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
    """Every kind and ablation at the preset's rate; the runs in the store, their records beside the page."""
    from tra_attn.experiments.flipflop.main_job import METHODS
    from tra_attn.experiments.store import Evidence

    out_dir, store = tmp_path / "ff", tmp_path / "store"
    argv = ["flipflop", "--preset", "tiny", "--seeds", "0", "1", "--out", out_dir, "--store", store, "--no-progress"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert re.search(r"^\| TRA( †)? \| 0.003 \| 2 \|", out, re.M) and re.search(r"^\| NoPE( †)? \|", out, re.M)
    assert out.endswith((out_dir / "README.md").read_text() + "\n") and "Command: `tra flipflop --preset tiny" in out
    evidence = Evidence(out_dir / "runs")
    assert len(evidence.runs()) == 2 * len(METHODS) == len(list(store.iterdir()))
    assert (out_dir / "accuracy.png").stat().st_size > 1000
    # Finished runs are reused: a second call trains nothing and writes the same page.
    records = {r: evidence.path(r).read_text() for r in evidence.runs()}
    assert run(argv, capsys)[0] == 0
    assert {r: evidence.path(r).read_text() for r in evidence.runs()} == records
    # A record lost from beside the page comes back from the store without training.
    lost = evidence.runs()[0]
    evidence.path(lost).unlink()
    assert run(argv, capsys)[0] == 0 and evidence.path(lost).read_text() == records[lost]


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
