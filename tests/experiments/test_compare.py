"""``tra compare``: a task added to comparisons by one record, language modelling's sweep seeds and its
refusal to train to fit, the aliases' agreement with ``tra compare``, and the direction of the imports."""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

from tests.cli.test_cli import run
from tra_attn.experiments.bench.presets import TINY_MODEL, TINY_TRAIN
from tra_attn.experiments.bench.report import write_report
from tra_attn.experiments.preset import Preset
from tra_attn.experiments.procedural import procedural_experiment
from tra_attn.experiments.registry import experiments, register_experiment, unregister_experiment
from tra_attn.experiments.tables import sweep_table
from tra_attn.utils.rows import read_rows

SRC = Path(__file__).parents[2] / "src" / "tra_attn"
TINY = ["--preset", "tiny", "--methods", "tra", "--no-progress"]

# A task added to comparisons: MQAR with 2 pairs of a small vocabulary, trained 6 steps. One record.
FEW_PAIRS = procedural_experiment(
    "mqar_few_pairs",
    {
        "tiny": Preset(
            task_args=dict(num_pairs=2, num_keys=8, num_values=8),
            model=TINY_MODEL,
            train={**TINY_TRAIN, "steps": 6, "eval_every": 3, "checkpoint_every": 6},
            lr=3e-3,
            seeds=(0,),
            eval_budget=8,
            description="MQAR with 2 pairs, 6 steps",
        )
    },
    write_report,
    summary="MQAR with two pairs",
    task="mqar",
)


@pytest.fixture
def few_pairs():
    yield register_experiment(FEW_PAIRS)
    unregister_experiment(FEW_PAIRS.name)


def test_a_task_added_by_one_record_runs_through_compare_and_report(few_pairs, tmp_path, capsys):
    code, out, err = run(["compare", "mqar_few_pairs", *TINY, "--lrs", "1e-3", "3e-3", "--out", tmp_path], capsys)
    assert code == 0, err
    page = (tmp_path / "results.md").read_text()
    assert page.startswith("# mqar: TRA, ablations and baselines") and page in out
    assert "(num_keys=8, num_pairs=2, num_values=8)" in page and "Learning-rate sweep" in page
    rows = read_rows(tmp_path / "results.jsonl")
    assert {r["config"]["task_args"]["num_pairs"] for r in rows} == {2} and {r["method"] for r in rows} == {"tra"}
    assert sorted(p.name for p in (tmp_path / "runs" / "tra").iterdir()) == ["lr0.001-seed0", "lr0.003-seed0"]
    assert run(["report", tmp_path], capsys)[0] == 0
    assert (tmp_path / "results.md").read_text() == page
    with pytest.raises(ValueError, match="'mqar_few_pairs' is already registered"):
        register_experiment(FEW_PAIRS)


def test_a_diverging_learning_rate_is_recorded_as_diverged_and_never_selected(few_pairs, tmp_path, capsys):
    """lr 1e9 diverges at step 2: its rows say so (the selection metric NaN), the sweep table says
    "diverged", the other rate is selected, and a second call does not train the diverged run again."""
    argv = ["compare", "mqar_few_pairs", *TINY, "--lrs", "3e-3", "1e9", "--out", tmp_path]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    diverged_run = tmp_path / "runs" / "tra" / "lr1e+09-seed0"
    assert f"{diverged_run}: training diverged at step 2" in out
    assert re.search(r"^\| TRA \| \d\.\d{3} \| diverged \| 0\.003 \|$", out, re.M)  # the sweep table
    assert json.loads((tmp_path / "selected_lrs.json").read_text()) == {"tra": 0.003}
    rows = {r["metric"]: r["value"] for r in read_rows(diverged_run / "eval.jsonl")}
    assert rows.keys() == {"full_seq_acc", "diverged"} and math.isnan(rows["full_seq_acc"]) and rows["diverged"] == 2
    assert not (diverged_run / "checkpoints").exists()
    before = (diverged_run / "eval.jsonl").stat().st_mtime_ns
    code, again, _ = run(argv, capsys)
    assert code == 0 and "training diverged" not in again and (diverged_run / "eval.jsonl").stat().st_mtime_ns == before
    assert again.split("# mqar")[1] == out.split("# mqar")[1]  # the same page


def test_a_comparison_whose_every_run_diverged_still_writes_its_page(few_pairs, tmp_path, capsys):
    code, out, err = run(["compare", "mqar_few_pairs", *TINY, "--lrs", "1e9", "--out", tmp_path], capsys)
    assert code == 0, err
    assert re.search(r"^\| TRA † \| 1e\+09 \| 1 \| diverged \| diverged \|", out, re.M)
    assert "None: every run diverged before its evaluation." in out


def test_tables_show_how_many_seeds_diverged():
    def row(lr, seed, metric, value):
        return {"method": "tra", "lr": lr, "seed": seed, "split": "validation", "metric": metric, "value": value}

    sweep = [row(1e-3, s, "full_seq_acc", 1.0) for s in (0, 1)] + [row(1e-2, 0, "full_seq_acc", 1.0)]
    sweep += [row(1e-2, 1, "full_seq_acc", math.nan), row(1e-2, 1, "diverged", 7)]
    sweep += [row(1e-1, s, m, v) for s in (0, 1) for m, v in (("full_seq_acc", math.nan), ("diverged", 2))]
    assert sweep_table(sweep, {"tra": 1e-3}, "full_seq_acc")[2] == (
        "| TRA | 1.000 ± 0.000 | diverged (1 of 2 seeds) | diverged | 0.001 |"
    )


def test_the_aliases_find_the_runs_of_compare_and_write_the_same_rows(tmp_path, capsys):
    """`tra flipflop` and `tra bench --task` after `tra compare` into the same folder: every run is found
    finished (same folders, same configs) and the rows are the same."""
    steps = ["--steps", "4"]
    for alias in (["flipflop"], ["bench", "--task", "flipflop"]):
        assert run(["compare", "flipflop", *TINY, *steps, "--out", tmp_path / alias[0]], capsys)[0] == 0
        rows = read_rows(tmp_path / alias[0] / "results.jsonl")
        eval_file = tmp_path / alias[0] / "runs" / "tra" / "lr0.003-seed0" / "eval.jsonl"
        before = eval_file.stat().st_mtime_ns
        code, out, _ = run([*alias, *TINY, *steps, "--out", tmp_path / alias[0]], capsys)
        assert code == 0 and eval_file.stat().st_mtime_ns == before
        assert read_rows(tmp_path / alias[0] / "results.jsonl") == rows
        assert json.loads((tmp_path / alias[0] / "run.json").read_text())["command"].startswith(f"tra {alias[0]} ")


def test_lm_sweeps_on_the_sweep_seeds_only(tmp_path, capsys, monkeypatch):
    """`tra compare lm` with --sweep-seeds: both rates on seed 0, seed 1 at the selected rate only."""
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["compare", "lm", *TINY, "--lrs", "1e-3", "3e-3", "--seeds", "0", "1", "--sweep-seeds", "0"]
    code, _, err = run([*argv, "--out", tmp_path / "cmp"], capsys)
    assert code == 0, err
    selected = json.loads((tmp_path / "cmp" / "selected_lrs.json").read_text())["tra"]
    folders = sorted(p.name for p in (tmp_path / "cmp" / "runs" / "tra").iterdir())
    assert folders == sorted(["lr0.001-seed0", "lr0.003-seed0", f"lr{selected:g}-seed1"])
    assert {r["seed"] for r in read_rows(tmp_path / "cmp" / "sweep.jsonl")} == {0}
    assert {(r["lr"], r["seed"]) for r in read_rows(tmp_path / "cmp" / "results.jsonl")} == {
        (selected, 0),
        (selected, 1),
    }


@pytest.mark.parametrize("command", [["compare", "lm"], ["compare", "lm", "--steps", "3"]])
def test_lm_refuses_to_train_to_fit_before_any_work(command, tmp_path, capsys):
    code, _, err = run([*command, *TINY, "--fit-accuracy", "0.9", "--out", tmp_path / "lm"], capsys)
    assert code == 2 and "--fit-accuracy = 0.9: the lm comparison cannot train to fit" in err
    assert not (tmp_path / "lm").exists()


def test_compare_needs_one_registered_task_or_the_suite(tmp_path, capsys):
    assert "expected exactly one of TASK and --suite" in run(["compare", "--out", tmp_path], capsys)[2]
    assert "TASK = 'sorting'; expected one of [" in run(["compare", "sorting", "--out", tmp_path], capsys)[2]
    assert set(experiments()) >= {"flipflop", "lm", "hierarchy", "mqar", "selective_copy", "majority"}


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved), at any depth of the file."""
    package = ".".join(("tra_attn", *path.relative_to(SRC).parent.parts))
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_no_experiment_module_imports_the_cli():
    offending = {
        str(path.relative_to(SRC)): sorted(m for m in imported_modules(path) if m.split(".")[:2] == ["tra_attn", "cli"])
        for path in (SRC / "experiments").rglob("*.py")
    }
    assert "tra_attn.cli.compare" in imported_modules(SRC / "cli" / "__init__.py")  # the check resolves imports
    assert {path: names for path, names in offending.items() if names} == {}


@pytest.mark.parametrize(
    "flags,message",
    [
        (["flipflop", "--methods", "tra", "tra"], r"--methods: \['tra'\] given more than once; expected each once"),
        (["flipflop", "--methods", "tra", "--seeds", "0", "1", "0"], r"--seeds: \[0\] given more than once"),
        (["flipflop", "--methods", "tra", "--lrs", "1e-3", "0.001"], r"--lrs: \[0\.001\] given more than once"),
        (
            ["flipflop", "--methods", "tra", "--seeds", "0", "1", "--lrs", "1e-3", "3e-3", "--sweep-seeds", "0", "0"],
            r"--sweep-seeds: \[0\] given more than once",
        ),
        (["--suite", "--tasks", "mqar", "mqar"], r"--tasks: \['mqar'\] given more than once"),
        (["--suite", "--tasks", "mqar", "--methods", "fox", "fox"], r"--methods: \['fox'\] given more than once"),
    ],
)
def test_a_name_given_twice_is_refused_before_any_work(flags, message, tmp_path, capsys):
    """`--methods tra tra` trained once and wrote every row twice."""
    code, _, err = run(["compare", *flags, "--preset", "tiny", "--out", tmp_path / "cmp"], capsys)
    assert code == 2 and re.fullmatch(rf"tra: error: {message}.*\n", err), err
    assert not (tmp_path / "cmp").exists()
