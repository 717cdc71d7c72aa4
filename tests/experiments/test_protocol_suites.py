"""The field's protocols as questions: the ASEntmax authors' synthetic suite and the small RULER. Their presets build
valid runs on the authors' training lengths, their pages tabulate hand-made rows as the papers do (exact match per
test seq_len, the published cells beside ours, RULER's item accuracy, needles by length and depth), and a tiny
question over every task of a suite trains and writes its page."""

from __future__ import annotations

import math

import pytest

from tests.cli.test_cli import run
from tests.questions import write_question
from tra_attn.data import make_task
from tra_attn.data.synthetic.asentmax_layout import training_lengths
from tra_attn.experiments.asentmax import ASENTMAX_TASKS
from tra_attn.experiments.asentmax.presets import AUTHORS, PRESETS
from tra_attn.experiments.asentmax.published import PUBLISHED
from tra_attn.experiments.asentmax.report import published_lines, reach, seq_len_columns, summary_cells
from tra_attn.experiments.engine import run_config
from tra_attn.experiments.methods import Method
from tra_attn.experiments.pages.tables import Legend
from tra_attn.experiments.registry import experiments
from tra_attn.experiments.ruler import RULER_TASKS
from tra_attn.experiments.ruler.report import is_needle, longest_cells
from tra_attn.experiments.spec import Question


@pytest.mark.parametrize("task", [*ASENTMAX_TASKS, *RULER_TASKS])
@pytest.mark.parametrize("preset", ["cpu", "tiny"])
def test_every_protocol_task_has_presets_that_build_runs_whose_test_splits_exist(task, preset):
    question = Question("x?", task, (Method("tra"),), (0,), lrs=(1e-3,), lrs_source="a test", preset=preset)
    config = run_config(experiments()[task], question, Method("tra"), 1e-3, 0)
    assert config.task == task and config.fit_accuracy == 0.99
    assert config.model.vocab_size == make_task(task, **config.task_args).vocab_size
    if task in ASENTMAX_TASKS:  # the authors' training range: seq_len 32..64 (local count 64..128)
        assert (config.length, config.length_spread) == training_lengths(make_task(task))
    if preset == "tiny":
        config.task_instance().eval_splits(config.length, 1)  # the cpu preset's longest split is built in CI below


def test_the_cpu_preset_tests_every_asentmax_task_to_seq_len_4096_on_its_authors_lengths():
    """Reverse to the authors' 512; 100 sequences per length to seq_len 1024 (a cell moves by 0.01 per sequence)."""
    for task in ASENTMAX_TASKS:
        preset = PRESETS[task]["cpu"]
        instance = make_task(task, **preset.task_args)
        assert instance.longest_test == (512 if task == "asentmax_reverse" else 4096)
        assert preset.eval_budget == 100 and "100 sequences per length to seq_len 1024" in preset.description
        low, high = instance.authors_train_seq_len
        assert (low, high) == ((64, 128) if task == "asentmax_local_count" else (32, 64))
        assert f"1/{AUTHORS[task].samples / (preset.train['steps'] * preset.train['batch_size']):,.0f}" in (
            preset.description
        )


def test_the_longest_asentmax_split_of_the_cpu_preset_is_built():
    instance = make_task("asentmax_copy", longest_test=4096)
    splits = instance.eval_splits(131, 1)
    assert [s.params["seq_len"] for s in splits] == [64, 128, 256, 512, 1024, 2048, 4096]
    assert splits[-1].batch.tokens.shape == (1, 2 * 4096 + 3)


def asentmax_rows(task="asentmax_copy", values=None):
    """Hand-made rows of two methods on ``task`` at seq_len 64..512, 2 seeds; ASEntmax falls off after 256."""
    instance = make_task(task, longest_test=512)
    length, spread = training_lengths(instance)
    config = {"task": task, "task_args": {"longest_test": 512}, "length": length, "length_spread": spread}
    values = values or {"TRA": [1.0, 1.0, 1.0, 0.5], "ASEntmax": [1.0, 0.95, 0.85, 0.0]}
    rows = []
    for method, accs in values.items():
        for seed in (0, 1):
            common = {"task": task, "method": method, "seed": seed, "lr": 1e-3, "config": config}
            rows.append({**common, "split": "validation", "length": length, "metric": "full_seq_acc", "value": 1.0})
            for seq_len, acc in zip((64, 128, 256, 512), accs):
                n = instance.length_of(seq_len)
                rows.append({**common, "split": "test", "length": n, "metric": "full_seq_acc", "value": acc})
    return rows


def test_asentmax_columns_are_the_authors_seq_len_with_tokens_in_brackets():
    assert [c[0] for c in seq_len_columns(asentmax_rows())] == ["64 (131)", "128 (259)", "256 (515)", "512 (1027)"]
    mqmtar = seq_len_columns(asentmax_rows("asentmax_mqmtar"))
    assert [c[0].split()[0] for c in mqmtar] == ["64", "128", "256", "512"]  # its own seq_len, not the smallest


def test_reach_is_the_longest_seq_len_held_at_every_shorter_one():
    assert reach([(64, 1.0), (128, 0.95), (256, 0.85), (512, 0.95)]) == 128
    assert reach([(64, 0.5), (128, 1.0)]) is None
    assert reach([(64, 1.0), (128, math.nan)]) == 64


def test_the_summary_gives_the_longest_value_and_the_reach_per_method():
    rows = asentmax_rows()
    longest, reaches = summary_cells(rows, ["TRA", "ASEntmax"])
    assert longest == ["0.500", "0.000"] and reaches == ["256", "128"]


def test_the_published_cells_sit_beside_ours_at_the_same_seq_len():
    lines = published_lines(asentmax_rows(), Legend([Method("tra"), Method("asentmax")]), "###")
    header = next(line for line in lines if line.startswith("| method |"))
    assert header == "| method | 64 | 128 | 256 | 512 | 1024 | 2048 | 4096 |"
    published = PUBLISHED["asentmax_copy"]["ASEntmax (NAPE)"]
    assert f"| ASEntmax (NAPE), published | {published[64]:g} | {published[128]:g} |" in "\n".join(lines)
    assert "| ASEntmax, here | 100.0 | 95.0 | 85.0 | 0.0 | n/a | n/a | n/a |" in lines
    assert published_lines(asentmax_rows("asentmax_nback"), Legend([Method("tra")]), "###") == []  # none published


def ruler_rows(needle: bool):
    config = {"task": "ruler_niah_single", "length": 32, "task_args": {}}
    rows = []
    for method, value in (("TRA", 1.0), ("FoX", 0.25)):
        for seed in (0, 1):
            common = {"task": config["task"], "method": method, "seed": seed, "lr": 1e-3, "config": config}
            rows.append({**common, "split": "validation", "length": 32, "metric": "full_seq_acc", "value": value})
            for length in (32, 512):
                for split in ("depth0", "depth1") if needle else ("iid",):
                    for metric, v in (("full_seq_acc", value), ("item_acc", (value + 1) / 2)):
                        shifted = v / 2 if split == "depth1" and length == 512 else v
                        rows.append({**common, "split": split, "length": length, "metric": metric, "value": shifted})
    return rows


def test_ruler_summary_cells_read_the_longest_length_over_every_depth():
    assert is_needle(ruler_rows(True)) and not is_needle(ruler_rows(False))
    assert longest_cells(ruler_rows(True), ["TRA", "FoX"], "full_seq_acc") == ["0.750", "0.188 †"]
    assert longest_cells(ruler_rows(False), ["TRA", "FoX"], "item_acc") == ["1.000", "0.625 †"]


@pytest.mark.parametrize("tasks, opening", [(ASENTMAX_TASKS, "## Summary\n"), (RULER_TASKS, "## Summary: at 16x")])
def test_a_tiny_question_over_a_whole_suite_trains_and_writes_its_page(tasks, opening, tmp_path, capsys):
    folder = write_question(tmp_path, tuple(tasks), kinds=("tra",), lrs=(3e-3,), name="suite")
    run(["run", folder, "--store", tmp_path / "store", "--no-progress"], capsys)
    page = (folder / "README.md").read_text()
    assert opening in page and all(f"\n## {task}\n" in page for task in tasks)
    if tasks == ASENTMAX_TASKS:
        assert "### Beside the published numbers" in page and (folder / "accuracy_by_seq_len.png").is_file()
        assert "| method | lr | seeds | 64 (131) | 128 (259) |" in page
    else:
        assert "### Item accuracy per length (mean over depths)" in page
        assert (folder / "ruler_niah_single_grid.png").is_file()
