"""``tra bench``: any procedural task or the whole suite through the flip-flop protocol (sweep on some
seeds, the rest at the selected rate, train-to-fit, report), its learning-rate rule and its errors."""

from __future__ import annotations

import json
import re

import pytest

from tra_attn.cli import main
from tra_attn.experiments.bench.presets import PRESETS, SUITE_TASKS
from tra_attn.experiments.engine import run_config
from tra_attn.experiments.fit import steps_to_fit, steps_to_fit_cell, unfit_methods
from tra_attn.experiments.flipflop.presets import PRESETS as FLIPFLOP_PRESETS
from tra_attn.experiments.registry import experiments
from tra_attn.utils.rows import read_rows

SWEEP = ["--lrs", "1e-3", "3e-3"]
TINY_SUITE = ["bench", "--suite", "--tasks", "mqar", "majority", "--preset", "tiny", "--methods", "tra", "nope"]
TINY_SUITE += [*SWEEP, "--seeds", "0", "1", "--sweep-seeds", "0", "--no-progress"]


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A tiny suite of two tasks: rates 1e-3 and 3e-3 swept on seed 0, then seed 1 at the selected rate."""
    out = tmp_path_factory.mktemp("suite")
    assert main([str(a) for a in [*TINY_SUITE, "--out", out]]) == 0
    return out


def run_folders(folder):
    return sorted(str(p.relative_to(folder / "runs")) for p in (folder / "runs").glob("*/*"))


def test_the_sweep_runs_on_the_sweep_seeds_and_the_other_seeds_at_the_selected_rate(suite):
    for task in ("mqar", "majority"):
        selected = json.loads((suite / task / "selected_lrs.json").read_text())
        assert set(selected) == {"tra", "nope"}
        expected = []
        for method in ("nope", "tra"):
            expected += [f"{method}/lr0.001-seed0", f"{method}/lr0.003-seed0", f"{method}/lr{selected[method]:g}-seed1"]
        assert run_folders(suite / task) == sorted(expected)
        sweep = read_rows(suite / task / "sweep.jsonl")
        assert {r["seed"] for r in sweep} == {0}  # the sweep's table sees the sweep seeds only
        rows = read_rows(suite / task / "results.jsonl")
        assert {(r["method"], r["lr"]) for r in rows} == set(selected.items())
        assert {r["seed"] for r in rows} == {0, 1}


def test_the_suite_page_has_a_summary_and_every_tasks_tables(suite):
    rows = read_rows(suite / "results.jsonl")
    assert {r["task"] for r in rows} == {"mqar", "majority"}
    page = (suite / "results.md").read_text()
    assert page.startswith("# Length-generalisation suite")
    assert "## Summary" in page and "## mqar" in page and "## majority" in page
    assert "| mqar | " in page and "| majority | " in page
    assert "steps to fit (per seed)" in page and "never" in page  # 10 steps: nothing fits
    for task in ("mqar", "majority"):
        assert (suite / task / "accuracy.png").stat().st_size > 0
        assert f"({task}/accuracy.png)" in page


def test_runs_trained_to_fit_record_their_steps(suite):
    rows = read_rows(suite / "mqar" / "results.jsonl")
    steps = [r for r in rows if r["split"] == "validation" and r["metric"] == "steps"]
    assert len(steps) == 4 and all(r["value"] == 10 for r in steps)  # the cap: the tiny preset never fits
    assert all(r["config"]["fit_accuracy"] == 0.99 for r in rows)


def test_a_second_run_trains_nothing_and_report_rebuilds_the_same_page(suite, capsys):
    before = {p: p.stat().st_mtime_ns for p in suite.glob("*/runs/*/*/eval.jsonl")}
    page = (suite / "results.md").read_text()
    assert run([*TINY_SUITE, "--out", suite], capsys)[0] == 0
    assert {p: p.stat().st_mtime_ns for p in suite.glob("*/runs/*/*/eval.jsonl")} == before
    assert (suite / "results.md").read_text() == page
    assert run(["report", suite], capsys)[0] == 0
    assert (suite / "results.md").read_text() == page


def test_one_task_and_flipflop_through_bench(tmp_path, capsys):
    argv = ["--preset", "tiny", "--methods", "tra", "--no-progress", "--out"]
    code, out, _ = run(["bench", "--task", "selective_copy", *argv, tmp_path / "sc"], capsys)
    page = (tmp_path / "sc" / "results.md").read_text()
    assert code == 0 and page.startswith("# selective_copy: TRA, ablations and baselines") and page in out
    lines = page.splitlines()
    header = lines[lines.index("## Full-sequence accuracy (mean ± std over seeds)") + 2]
    assert header.startswith("| method | lr | seeds | iid (64) | sparse (64) | dense (64) | iid 2x (128) |")
    assert "| iid 8x (512) |" in header
    code, out, _ = run(["bench", "--task", "flipflop", *argv, tmp_path / "ff"], capsys)
    assert code == 0 and (tmp_path / "ff" / "results.md").read_text().startswith("# Flip-flop language modelling")


def test_a_page_without_a_sweep_says_where_its_learning_rates_came_from(tmp_path, capsys):
    argv = ["bench", "--task", "majority", "--preset", "tiny", "--methods", "tra", "--no-progress", "--out"]
    assert run([*argv, tmp_path / "preset"], capsys)[0] == 0
    assert "Learning rates: the preset's." in (tmp_path / "preset" / "results.md").read_text()
    assert run([*argv, tmp_path / "given", "--lrs", "2e-3"], capsys)[0] == 0
    page = (tmp_path / "given" / "results.md").read_text()
    assert "Learning rate: 0.002 for every method (given with --lrs; no sweep on validation data)." in page
    assert "the preset's" not in page
    source = FLIPFLOP_PRESETS["cpu"].learning_rate_source(None)
    assert source.startswith("Learning rates: the preset's, each selected on held-out IID validation data")


def test_a_flipflop_page_trained_to_fit_states_the_rule_and_the_steps(tmp_path, capsys):
    argv = ["flipflop", "--preset", "tiny", "--methods", "tra", "--no-progress", "--fit-accuracy", "0.99"]
    assert run([*argv, "--out", tmp_path], capsys)[0] == 0
    page = (tmp_path / "results.md").read_text()
    assert "trained to fit: each run stops at the first validation (every 10 steps, 32 held-out sequences) " in page
    assert "with full-sequence accuracy >= 0.99, at most 20 steps" in page
    assert re.search(r"\| TRA( †)? \| 0\.003 \| 1 \| .* \| (never|\d+) \|$", page, re.M)


def test_selection_treats_every_fitted_rate_as_equal_and_prefers_the_smallest():
    def val(method, lr, seed, acc):
        return {"method": method, "lr": lr, "seed": seed, "split": "validation", "metric": "full_seq_acc", "value": acc}

    rows = [val("tra", 1e-3, 0, 0.991), val("tra", 3e-3, 0, 1.0), val("fox", 1e-3, 0, 0.95), val("fox", 3e-3, 0, 0.98)]
    rows += [val("nope", 1e-3, 0, 0.5), val("nope", 1e-3, 1, 1.0), val("nope", 3e-3, 0, 0.8), val("nope", 3e-3, 1, 0.8)]
    assert experiments()["mqar"].select_lrs(rows) == {"tra": 1e-3, "fox": 3e-3, "nope": 3e-3}


def test_steps_to_fit_per_seed_and_unfit_methods():
    def r(method, seed, metric, value):
        return {"method": method, "seed": seed, "split": "validation", "metric": metric, "value": value}

    rows = [r("tra", 1, "steps", 150), r("tra", 1, "steps_to_fit", 150), r("tra", 0, "steps", 300)]
    rows += [r("tra", 0, "steps_to_fit", 300), r("nope", 0, "steps", 1000), r("nope", 0, "full_seq_acc", 0.4)]
    rows += [r("tra", 0, "full_seq_acc", 0.995), r("fox", 0, "full_seq_acc", 1.0)]  # fox: a fixed-budget run
    assert steps_to_fit(rows) == {"tra": [300, 150], "nope": [None]}
    assert steps_to_fit_cell([300, None]) == "300, never" and steps_to_fit_cell([]) == "n/a"
    assert unfit_methods(rows) == {"nope"}


def test_every_suite_task_has_cpu_and_tiny_presets_that_build_valid_configs():
    for task in SUITE_TASKS:
        for name in ("cpu", "tiny"):
            config = run_config(experiments()[task], PRESETS[task][name], "tra", 1e-3, 0)
            assert config.task == task and config.fit_accuracy == 0.99
            config.task_instance().eval_splits(config.length, 1)  # every test split exists at this length


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["bench", "--out", "{tmp}/b"], "expected exactly one of --task NAME and --suite"),
        (["bench", "--task", "mqar", "--suite", "--out", "{tmp}/b"], "expected exactly one of --task NAME and --suite"),
        (["bench", "--task", "sorting", "--out", "{tmp}/b"], r"--task = 'sorting'; expected one of"),
        (["bench", "--suite", "--tasks", "sorting", "--out", "{tmp}/b"], r"--tasks: unknown suite task 'sorting'"),
        (["bench", "--task", "mqar", "--tasks", "mqar", "--out", "{tmp}/b"], "expected it with --suite"),
        (["bench", "--task", "mqar", "--preset", "paper", "--out", "{tmp}/b"], r"--preset = 'paper'"),
        (["bench", "--task", "mqar", "--preset", "tiny", "--fit-accuracy", "2", "--out", "{tmp}/b"], "= 2.0; expected"),
        (["bench", "--task", "mqar", "--lrs", "1e-3", "3e-3", "--sweep-seeds", "--out", "{tmp}/b"], "at least"),
        (["bench", "--task", "mqar", "--sweep-seeds", "0", "--out", "{tmp}/b"], "expected --lrs with 2 or more"),
        (["bench", "--task", "mqar", *SWEEP, "--seeds", "1", "--sweep-seeds", "0", "--out", "{tmp}/b"], "of the seeds"),
    ],
)
def test_bad_bench_input_gets_a_clear_error_and_trains_nothing(argv, pattern, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code, out, err = run(argv, capsys)
    except SystemExit as exit_:  # argparse's own errors
        code, err = exit_.code, capsys.readouterr().err
    assert code == 2 and re.search(pattern, err), err
    assert not list(tmp_path.glob("**/checkpoints"))
