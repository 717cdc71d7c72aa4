"""The scorecard pools comparisons, refuses unequal budgets and checks every bar (experiments/scorecard.py)."""

from __future__ import annotations

import re

import pytest

from tra_attn.cli import main
from tra_attn.experiments.pool import pooled_rows
from tra_attn.experiments.scorecard import scorecard
from tra_attn.utils.jsonl import write_jsonl


def config(task: str, steps: int = 100) -> dict:
    return {"task": task, "task_args": {"b": 1, "a": 2}, "length": 64, "steps": steps, "model": {"d_model": 32}}


def row(task, method, seed, split, length, metric, value, steps=100):
    return dict(task=task, method=method, seed=seed, split=split, length=length, metric=metric, value=value,
                lr=1e-3, config=config(task, steps))  # fmt: skip


def text_rows(method: str, bpb_1x: float, bpb_16x: float) -> list[dict]:
    return [
        row("lm", method, seed, "non_overlapping", length, "bits_per_byte", value)
        for seed in (0, 1)
        for length, value in ((128, bpb_1x), (2048, bpb_16x))
    ]


def accuracy_rows(task, method, accuracies: dict[int, list[float]], fitted_at: list[int | None]) -> list[dict]:
    rows = [
        row(task, method, seed, "iid", length, "full_seq_acc", value)
        for length, values in accuracies.items()
        for seed, value in enumerate(values)
    ]
    for seed, step in enumerate(fitted_at):
        rows.append(row(task, method, seed, "validation", 64, "steps", 100))
        if step is not None:
            rows.append(row(task, method, seed, "validation", 64, "steps_to_fit", step))
    return rows


def write(folder, rows) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "results.jsonl", rows)


@pytest.fixture
def folders(tmp_path):
    text, flipflop, suite = tmp_path / "text", tmp_path / "flipflop", tmp_path / "suite"
    write(text, text_rows("fox", 2.0, 2.0) + text_rows("good", 2.008, 1.99)
                + text_rows("bad", 2.02, 2.03))  # fmt: skip
    write(flipflop, accuracy_rows("flipflop", "fox", {128: [0.9, 1.0]}, [1, 1])
                + accuracy_rows("flipflop", "good", {128: [1.0, 0.995]}, [1, 1])
                + accuracy_rows("flipflop", "bad", {128: [1.0, 0.98]}, [1, 1]))  # fmt: skip
    write(suite / "majority", accuracy_rows("majority", "fox", {64: [1, 1], 512: [0.6, 0.7]},
                [50, 50]) + accuracy_rows("majority", "good", {64: [1, 1], 512: [1.0, 0.995]}, [50, 50])
                + accuracy_rows("majority", "bad", {64: [1, 1], 512: [1.0, 0.5]}, [50, 50]))  # fmt: skip
    write(suite / "mqar", accuracy_rows("mqar", "fox", {64: [1, 0]}, [50, None])
                + accuracy_rows("mqar", "good", {64: [1, 1]}, [50, 70])
                + accuracy_rows("mqar", "bad", {64: [0, 0]}, [None, None]))  # fmt: skip
    return text, flipflop, suite


def test_scorecard_checks_every_bar(folders):
    text, flipflop, suite = folders
    columns, table, sources = scorecard(["good", "bad"], "fox", [text], [flipflop], [suite / "majority"],
                                        [suite / "mqar"])  # fmt: skip
    assert columns == [
        "lm, 100 steps: bits per byte vs FoX, 1x / longest",
        "flipflop, 100 steps: worst split, worst seed",
        "majority, 100 steps at 512: worst seed",
        "mqar, 100 steps: seeds fitted",
    ]
    fox, good, bad = table
    assert fox["met"] is None and fox["cells"][3] == "1/2"
    assert good["met"] is True and good["cells"] == [
        "+0.40% / -0.50%",
        "0.995 (2/2 seeds exact)",
        "0.995 (2/2 seeds exact)",
        "2/2",
    ]
    assert bad["cells"][1:3] == ["0.980 (1/2 seeds exact)", "0.500 (1/2 seeds exact)"]
    assert bad["passed"] == [False, False, False, False] and bad["met"] is False
    assert sources["mqar, 100 steps: seeds fitted"]["good"] == suite / "mqar"
    # a looser bar at the longest length lets a small gap there pass
    _, table, _ = scorecard(["bad"], "fox", [text], fits=[suite / "mqar"], text_tolerance=0.011, long_tolerance=0.02)
    assert table[1]["passed"] == [True, False]


def test_pooling_takes_each_method_from_the_first_folder_and_refuses_other_budgets(tmp_path, folders):
    text, _, _ = folders
    other = tmp_path / "other"
    write(other, text_rows("fox", 9.0, 9.0) + text_rows("late", 2.0, 2.0))
    rows, source = pooled_rows([text, other])
    assert {r["value"] for r in rows if r["method"] == "fox"} == {2.0} and source["late"] == other
    longer = tmp_path / "longer"
    write(longer, [dict(r, config=config("lm", steps=999)) for r in text_rows("new", 2, 2)])
    with pytest.raises(ValueError, match="different budgets"):
        pooled_rows([text, longer])
    assert {r["method"] for r in pooled_rows([text, longer], methods=["fox"])[0]} == {"fox"}
    with pytest.raises(ValueError, match="missing or empty"):
        pooled_rows([tmp_path / "nothing"])


def test_scorecard_command_writes_the_page(folders, tmp_path, capsys):
    text, flipflop, suite = folders
    page = tmp_path / "page.md"
    argv = ["scorecard", "--candidates", "good", "bad", "--text", str(text), "--exact", str(flipflop)]
    argv += ["--exact-longest", str(suite / "majority"), "--fits", str(suite / "mqar"), "--markdown", str(page)]
    assert main(argv) == 0
    written = page.read_text()
    assert (
        "| good | +0.40% / -0.50% ✓ | 0.995 (2/2 seeds exact) ✓ | 0.995 (2/2 seeds exact) ✓ | 2/2 ✓ | **yes** |"
        in written
    )
    assert "| bad |" in written and "Command: `tra scorecard --candidates good bad" in written


def test_two_step_caps_of_one_task_are_two_columns(folders, tmp_path):
    _, _, suite = folders
    longer = tmp_path / "mqar_longer"
    rows = accuracy_rows("mqar", "fox", {64: [1, 1]}, [50, 60]) + accuracy_rows(
        "mqar", "good", {64: [1, 0]}, [50, None]
    )
    write(longer, [dict(r, config=config("mqar", steps=300)) for r in rows])
    columns, table, _ = scorecard(["good"], "fox", fits=[suite / "mqar", longer])
    assert columns == ["mqar, 100 steps: seeds fitted", "mqar, 300 steps: seeds fitted"]
    assert table[1]["cells"] == ["2/2", "1/2"] and table[1]["passed"] == [True, False]


@pytest.mark.parametrize("page", ["tra_one_config", "tra_invariance", "vs_rivals_scorecard"])
def test_the_committed_scorecard_page_rebuilds_from_the_committed_rows(page, tmp_path, monkeypatch, capsys):
    """Each committed scorecard page is what its own command prints from the committed rows."""
    import shlex
    from pathlib import Path

    root = Path(__file__).parents[2]
    committed = (root / "results" / f"{page}.md").read_text()
    command = committed.splitlines()[2].removeprefix("Command: `").removesuffix("`  ")
    argv = shlex.split(command)[1:]
    argv[argv.index("--markdown") + 1] = str(tmp_path / "page.md")
    monkeypatch.chdir(root)
    assert main([*argv, "--command", command]) == 0
    capsys.readouterr()
    assert (tmp_path / "page.md").read_text() == committed


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--candidates", "nosuch"], r"--candidates: \['nosuch'\] has no rows in any folder given; expected methods"),
        (["--candidates", "good", "--baseline", "nosuch"], r"--baseline: \['nosuch'\] has no rows in any folder"),
        (["--candidates", "good", "good"], r"--candidates: \['good'\] given more than once"),
        (["--candidates", "fox"], r"--candidates: 'fox' is the --baseline"),
    ],
)
def test_names_without_rows_are_refused_before_any_table(folders, tmp_path, capsys, flags, message):
    """`--candidates nosuch` (or `--baseline nosuch`) printed a row of n/a and exited 0."""
    text, flipflop, _ = folders
    page = tmp_path / "page.md"
    code = main(["scorecard", *flags, "--text", str(text), "--exact", str(flipflop), "--markdown", str(page)])
    err = capsys.readouterr().err
    assert code == 2 and re.fullmatch(rf"tra: error: {message}.*\n", err), err
    assert not page.exists()


def test_a_scorecard_without_folders_is_refused(capsys):
    assert main(["scorecard", "--candidates", "good"]) == 2
    assert "scorecard: no folders; expected comparison folders for at least one of --text" in capsys.readouterr().err
