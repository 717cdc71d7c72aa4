"""Report tables from hand-made result rows: columns, mean ± std over seeds, median time, unfit flags."""

import pytest

from tra_attn.experiments.flipflop.report import flipflop_columns, markdown_table, unfit_methods


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
            row("tra", seed, "validation", 8, "full_seq_acc", val_a),
            row("rope", seed, "validation", 8, "full_seq_acc", val_b),
            row("tra", seed, "validation", 8, "train_seconds", 60 * minutes),
            row("rope", seed, "validation", 8, "train_seconds", 60 * minutes),
        ]
        for split, length in [("iid", 8), ("sparse", 8), ("dense", 8), ("iid", 16), ("sparse", 64)]:
            out += [row("tra", seed, split, length, "full_seq_acc", 1.0)]
            out += [row("rope", seed, split, length, "full_seq_acc", [0.2, 0.4, 0.6][seed])]
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
    assert unfit_methods(rows()) == {"rope"}
    nan_rows = [row("fox", 0, "validation", 8, "full_seq_acc", float("nan"))]
    assert unfit_methods(nan_rows) == {"fox"}


def test_table_cells_mean_std_over_seeds_and_median_minutes():
    header, _, tra, rope = markdown_table(rows(), "full_seq_acc", with_time=True)
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


@pytest.mark.parametrize(
    "name, image",
    [
        ("flipflop_cpu_800", "![accuracy"),
        ("flipflop_cpu", "![accuracy"),
        ("flipflop_cpu_resweep", "![accuracy"),
        ("lm_austen", "![bits per byte"),
        ("tra_on_text", "![bits per byte"),
        ("suite_cpu", "![accuracy"),
        ("suite_cpu_cap3000", "![accuracy"),
        ("suite_cap_pilot", "![accuracy"),
        ("tra_one_config_hierarchy3000", "![accuracy"),
        ("tra_one_config_majority6", "![accuracy"),
        ("tra_local_context_text", "![bits per byte"),
        ("tra_local_context_flipflop", "![accuracy"),
        ("tra_local_context_suite", "![accuracy"),
        ("vs_rivals_majority", "![accuracy"),
        ("vs_rivals_passkey", "![exact match"),
        ("vs_rivals_mqar", "![accuracy"),
        ("vs_rivals_lm", "![bits per byte"),
        ("vs_rivals_hierarchy", "![accuracy"),
        ("vs_rivals_flipflop", "![accuracy"),
    ],
)
def test_the_committed_results_rebuild_into_the_committed_page(tmp_path, name, image, capsys):
    """`tra report` (the page of the rows' task, found in the experiment registry) gives the committed page
    line for line from the committed rows (flip-flop's rows were written by 0.1: version-1 configs,
    read_acc/reads)."""
    import shutil
    from pathlib import Path

    from tra_attn.cli import main

    results = Path(__file__).parents[2] / "results"
    shutil.copytree(results / name, tmp_path / name, ignore=shutil.ignore_patterns("runs"))  # local runs: not rows
    page = tmp_path / "p.md"
    argv = ["report", tmp_path / name, "--notes", results / f"{name}_notes.md", "--markdown", page]
    assert main([str(a) for a in argv]) == 0
    capsys.readouterr()
    committed = (results / f"{name}.md").read_text().splitlines()
    rebuilt = page.read_text().splitlines()
    assert len(rebuilt) == len(committed)
    for old, new in zip(committed, rebuilt):
        if old.startswith(("Regenerate this page", image)):
            continue  # they name the output paths
        assert new == old


@pytest.mark.parametrize("notes", ["Text.\n", "## Discussion\n\nText.\n", "\n## Discussion\nText."])
def test_a_page_has_one_discussion_heading_whether_or_not_the_notes_open_with_it(notes):
    from tra_attn.experiments.tables import discussion_lines

    assert discussion_lines(notes) == ["## Discussion", "", "Text."]


def test_notes_that_open_with_another_heading_keep_it():
    from tra_attn.experiments.tables import discussion_lines

    assert discussion_lines("## Discussion of X\n\nText.") == ["## Discussion", "", "## Discussion of X\n\nText."]
