"""Page tables from hand-made result rows: columns, mean ± std over seeds, median time, unfit flags, diverged
runs, the learning-rate choice; and the direction of the imports."""

import ast
import math
from pathlib import Path

import pytest

from tra_attn.experiments.engine import run_config
from tra_attn.experiments.fit import steps_to_fit, steps_to_fit_cell
from tra_attn.experiments.flipflop.report import flipflop_columns, markdown_table, unfit_methods
from tra_attn.experiments.methods import Method, kinds
from tra_attn.experiments.pages.tables import Legend, sweep_table
from tra_attn.experiments.registry import experiments
from tra_attn.experiments.selection import beyond, extension
from tra_attn.experiments.spec import Question
from tra_attn.experiments.suite import SUITE_TASKS

SRC = Path(__file__).parents[2] / "src" / "tra_attn"
LEGEND = Legend(kinds("tra", "rope", "cope", "nope"))


def row(method, seed, split, length, metric, value):
    return {
        "method": method,
        "seed": seed,
        "lr": 1e-3,
        "split": split,
        "length": length,
        "metric": metric,
        "value": value,
        "config": {"version": 2, "length": 8},
    }


def rows():
    out = []
    for seed, (val_a, val_b, minutes) in enumerate([(1.0, 0.5, 1.0), (1.0, 1.0, 2.0), (0.995, 1.0, 9.0)]):
        out += [
            row("TRA", seed, "validation", 8, "full_seq_acc", val_a),
            row("RoPE", seed, "validation", 8, "full_seq_acc", val_b),
            row("TRA", seed, "validation", 8, "train_seconds", 60 * minutes),
            row("RoPE", seed, "validation", 8, "train_seconds", 60 * minutes),
        ]
        for split, length in [("iid", 8), ("sparse", 8), ("dense", 8), ("iid", 16), ("sparse", 64)]:
            out += [row("TRA", seed, split, length, "full_seq_acc", 1.0)]
            out += [row("RoPE", seed, split, length, "full_seq_acc", [0.2, 0.4, 0.6][seed])]
    return out


def test_columns_put_the_training_length_first_then_each_splits_longer_lengths():
    assert flipflop_columns(rows()) == [
        ("iid (8)", "iid", 8),
        ("sparse (8)", "sparse", 8),
        ("dense (8)", "dense", 8),
        ("iid 2x (16)", "iid", 16),
        ("sparse 8x (64)", "sparse", 64),
    ]


def test_unfit_methods_are_those_below_the_fit_threshold_in_any_seed():
    assert unfit_methods(rows()) == {"RoPE"}
    nan_rows = [row("FoX", 0, "validation", 8, "full_seq_acc", float("nan"))]
    assert unfit_methods(nan_rows) == {"FoX"}


def test_table_cells_mean_std_over_seeds_and_median_minutes():
    header, _, tra, rope = markdown_table(rows(), LEGEND, "full_seq_acc", with_time=True)
    assert header.startswith("| method | lr | seeds | iid (8) |") and header.endswith("train minutes (median) |")
    assert tra == "| TRA | 0.001 | 3 | " + "1.000 ± 0.000 | " * 5 + "2.0 |"
    assert rope == "| RoPE † | 0.001 | 3 | " + "0.400 ± 0.200 | " * 5 + "2.0 |"


def test_learning_rate_selection_uses_validation_mean_and_breaks_ties_low():
    from tra_attn.experiments.flipflop import FLIPFLOP

    def val(method, lr, seed, acc, test_acc=0.0):
        common = {"method": method, "lr": lr, "seed": seed, "length": 8, "metric": "full_seq_acc"}
        return [{**common, "split": "validation", "value": acc}, {**common, "split": "iid", "value": test_acc}]

    rows = (
        val("tra", 1e-2, 0, 1.0)
        + val("tra", 1e-3, 0, 1.0)
        + val("tra", 3e-3, 0, 1.0)  # tie: smallest
        + val("rope", 1e-3, 0, 0.9, test_acc=1.0)
        + val("rope", 3e-3, 0, 0.95)  # test splits play no part
        + val("cope", 1e-3, 0, 1.0)
        + val("cope", 1e-3, 1, 0.2)
        + val("cope", 3e-3, 0, 0.7)  # mean over seeds
        + val("nope", 1e-3, 0, float("nan"))
        + val("nope", 3e-3, 0, 0.0)  # NaN ranks below everything
    )
    assert FLIPFLOP.select_lrs(rows) == {"tra": 1e-3, "rope": 3e-3, "cope": 3e-3, "nope": 3e-3}


def test_selection_treats_every_fitted_rate_as_equal_and_prefers_the_smallest():
    def val(method, lr, seed, acc):
        return {"method": method, "lr": lr, "seed": seed, "split": "validation", "metric": "full_seq_acc", "value": acc}

    rows = [val("tra", 1e-3, 0, 0.991), val("tra", 3e-3, 0, 1.0), val("fox", 1e-3, 0, 0.95), val("fox", 3e-3, 0, 0.98)]
    rows += [val("nope", 1e-3, 0, 0.5), val("nope", 1e-3, 1, 1.0), val("nope", 3e-3, 0, 0.8), val("nope", 3e-3, 1, 0.8)]
    assert experiments()["mqar"].select_lrs(rows) == {"tra": 1e-3, "fox": 3e-3, "nope": 3e-3}


@pytest.mark.parametrize(
    "rate, up, down",
    [(1e-3, 3e-3, 3e-4), (3e-3, 1e-2, 1e-3), (1e-2, 3e-2, 3e-3), (5e-4, 1e-3, 3e-4), (2e-3, 3e-3, 1e-3)],
)
def test_a_grid_extends_along_the_ladder_of_rates(rate, up, down):
    assert (beyond(rate, True), beyond(rate, False)) == (up, down)


def test_a_grid_extends_beyond_the_edge_its_choice_sits_at_unless_it_fitted_or_went_three_rates_out():
    grid = (1e-3, 3e-3, 1e-2)
    assert extension(grid, 1e-2, 0.5, 0.99, (0, 0)) == 3e-2  # the top edge: one rate above
    assert extension(grid, 1e-3, 0.5, 0.99, (0, 0)) == 3e-4  # the bottom edge: one rate below
    assert extension(grid, 3e-3, 0.5, 0.99, (0, 0)) is None  # inside
    assert extension(grid, 1e-3, 0.99, 0.99, (0, 0)) is None  # fitted: no rate does better
    assert extension(grid, 1e-2, 0.5, 0.99, (0, 3)) is None and extension(grid, 1e-3, 0.5, 0.99, (0, 3)) == 3e-4
    assert extension(grid, 1e-2, -2.0, math.inf, (0, 0)) == 3e-2  # no cap (bits per byte): any edge extends


def test_the_next_rate_of_a_method_reads_its_sweep():
    def val(lr, acc):
        return {"method": "tra", "lr": lr, "seed": 0, "split": "validation", "metric": "full_seq_acc", "value": acc}

    mqar = experiments()["mqar"]
    grid = (1e-3, 3e-3)
    assert mqar.next_rate([val(1e-3, 0.2), val(3e-3, 0.5)], grid, (0, 0)) == 1e-2
    assert mqar.next_rate([val(1e-3, 0.2), val(3e-3, 1.0)], grid, (0, 0)) is None  # fitted at the edge
    assert mqar.next_rate([val(1e-3, 0.2), val(3e-3, float("nan"))], grid, (0, 0)) == 3e-4  # diverged above
    assert mqar.next_rate([val(3e-4, 0.1), val(1e-3, 0.2), val(3e-3, 0.1)], (3e-4, *grid), (1, 0)) is None


def test_steps_to_fit_per_seed_and_unfit_methods():
    def r(method, seed, metric, value):
        return {"method": method, "seed": seed, "split": "validation", "metric": metric, "value": value}

    rows = [r("tra", 1, "steps", 150), r("tra", 1, "steps_to_fit", 150), r("tra", 0, "steps", 300)]
    rows += [r("tra", 0, "steps_to_fit", 300), r("nope", 0, "steps", 1000), r("nope", 0, "full_seq_acc", 0.4)]
    rows += [r("tra", 0, "full_seq_acc", 0.995), r("fox", 0, "full_seq_acc", 1.0)]  # fox: a fixed-budget run
    assert steps_to_fit(rows) == {"tra": [300, 150], "nope": [None]}
    assert steps_to_fit_cell([300, None]) == "300, never" and steps_to_fit_cell([]) == "n/a"
    assert unfit_methods(rows) == {"nope"}


def test_tables_show_how_many_seeds_diverged():
    def row(lr, seed, metric, value):
        return {"method": "TRA", "lr": lr, "seed": seed, "split": "validation", "metric": metric, "value": value}

    sweep = [row(1e-3, s, "full_seq_acc", 1.0) for s in (0, 1)] + [row(1e-2, 0, "full_seq_acc", 1.0)]
    sweep += [row(1e-2, 1, "full_seq_acc", math.nan), row(1e-2, 1, "diverged", 7)]
    sweep += [row(1e-1, s, m, v) for s in (0, 1) for m, v in (("full_seq_acc", math.nan), ("diverged", 2))]
    assert sweep_table(sweep, {"TRA": 1e-3}, "full_seq_acc", LEGEND)[2] == (
        "| TRA | 1.000 ± 0.000 | diverged (1 of 2 seeds) | diverged | 0.001 |"
    )


def test_every_suite_task_has_cpu_and_tiny_presets_that_build_valid_configs():
    for task in SUITE_TASKS:
        for preset in ("cpu", "tiny"):
            question = Question("x?", task, (Method("tra"),), (0,), lrs=(1e-3,), lrs_source="a test", preset=preset)
            config = run_config(experiments()[task], question, Method("tra"), 1e-3, 0)
            assert config.task == task and config.fit_accuracy == 0.99
            config.task_instance().eval_splits(config.length, 1)  # every test split exists at this length


def imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names, relative imports resolved)."""
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            found.add(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_no_experiment_module_imports_the_cli():
    offending = {
        str(path.relative_to(SRC)): sorted(m for m in imported_modules(path) if m.split(".")[:2] == ["tra_attn", "cli"])
        for path in (SRC / "experiments").rglob("*.py")
    }
    assert "tra_attn.cli.run" in imported_modules(SRC / "cli" / "__init__.py")  # the check resolves imports
    assert {path: names for path, names in offending.items() if names} == {}


@pytest.mark.parametrize("notes", ["Text.\n", "## Discussion\n\nText.\n", "\n## Discussion\nText."])
def test_a_page_has_one_discussion_heading_whether_or_not_the_notes_open_with_it(notes):
    from tra_attn.experiments.pages.tables import discussion_lines

    assert discussion_lines(notes) == ["## Discussion", "", "Text."]


def test_notes_that_open_with_another_heading_keep_it():
    from tra_attn.experiments.pages.tables import discussion_lines

    assert discussion_lines("## Discussion of X\n\nText.") == ["## Discussion", "", "## Discussion of X\n\nText."]
