"""``tra pool``: finished comparisons of one task drawn as one page, each method from the first folder that has it,
and refused when anything but the attention differs (experiments/pool.py)."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import run
from tests.experiments.test_compare import FEW_PAIRS
from tra_attn.cli import main
from tra_attn.experiments.pool import pool
from tra_attn.experiments.registry import register_experiment, unregister_experiment
from tra_attn.utils.rows import read_rows, write_rows


@pytest.fixture(scope="module")
def comparisons(tmp_path_factory):
    """Two finished comparisons of the same task and budget (NoPE in one, NoPE and ALiBi in the other), the
    task registered while the module's tests run."""
    register_experiment(FEW_PAIRS)
    root = tmp_path_factory.mktemp("pool")
    try:
        for name, methods in (("first", ["nope"]), ("second", ["nope", "alibi"])):
            argv = ["compare", "mqar_few_pairs", "--preset", "tiny", "--methods", *methods, "--lrs", "1e-3", "3e-3",
                    "--no-progress", "--out", root / name]  # fmt: skip
            assert main([str(a) for a in argv]) == 0
        yield root
    finally:
        unregister_experiment(FEW_PAIRS.name)


def test_pooled_folder_draws_one_page_with_every_method(comparisons, tmp_path, capsys):
    out = tmp_path / "pooled"
    code, printed, err = run(["pool", comparisons / "first", comparisons / "second", "--out", out], capsys)
    assert code == 0, err
    assert "2 methods (nope alibi)" in printed
    rows = read_rows(out / "results.jsonl")
    first = read_rows(comparisons / "first" / "results.jsonl")
    assert [r for r in rows if r["method"] == "nope"] == [r for r in first if r["method"] == "nope"]
    assert {r["method"] for r in read_rows(out / "sweep.jsonl")} == {"nope", "alibi"}
    selected = json.loads((out / "selected_lrs.json").read_text())
    second = json.loads((comparisons / "second" / "selected_lrs.json").read_text())
    assert selected.keys() == {"nope", "alibi"} and selected["alibi"] == second["alibi"]
    command = json.loads((out / "run.json").read_text())["command"]
    assert command.count("tra compare mqar_few_pairs") == 2 and command.endswith(f"--out {out}")
    code, page, err = run(["report", out], capsys)
    assert code == 0, err
    assert "| ALiBi |" in page and "| NoPE |" in page and "Learning-rate sweep" in page
    assert "(selected on a different sweep" not in page


def test_methods_and_seeds_select_what_is_pooled(comparisons, tmp_path):
    methods, count = pool([comparisons / "first", comparisons / "second"], tmp_path / "p", methods=["alibi"])
    assert methods == ["alibi"] and {r["method"] for r in read_rows(tmp_path / "p" / "results.jsonl")} == {"alibi"}
    methods, count = pool([comparisons / "first", comparisons / "second"], tmp_path / "o", methods=["alibi", "nope"])
    rows = read_rows(tmp_path / "o" / "results.jsonl")
    assert methods == ["alibi", "nope"] and list(dict.fromkeys(r["method"] for r in rows)) == methods
    with pytest.raises(ValueError, match="--methods fox: in none of"):
        pool([comparisons / "first"], tmp_path / "q", methods=["nope", "fox"])
    # pooled again into the same folder without a sweep: the earlier pool's sweep does not outlive it
    unswept = tmp_path / "unswept"
    copy_with(comparisons / "first", unswept, lambda row: row)
    (unswept / "sweep.jsonl").unlink()
    pool([comparisons / "first"], tmp_path / "p", methods=["nope"])
    assert (tmp_path / "p" / "sweep.jsonl").is_file()
    pool([unswept], tmp_path / "p")
    assert not (tmp_path / "p" / "sweep.jsonl").exists() and not (tmp_path / "p" / "selected_lrs.json").exists()
    with pytest.raises(ValueError, match=r"--seeds 7: no rows of these seeds"):
        pool([comparisons / "first"], tmp_path / "r", seeds=[7])
    assert not (tmp_path / "r").exists()


def copy_with(source, target, change) -> None:
    """A copy of a results folder whose rows (results and sweep) pass through ``change``."""
    target.mkdir()
    for name in ("results.jsonl", "sweep.jsonl"):
        write_rows(target / name, [change(dict(r)) for r in read_rows(source / name)])
    for name in ("selected_lrs.json", "run.json"):
        (target / name).write_text((source / name).read_text())


def test_anything_but_the_attention_differing_is_refused(comparisons, tmp_path):
    first = comparisons / "first"

    def longer(row):
        return {**row, "method": "alibi", "config": {**row["config"], "steps": 999}}

    copy_with(first, tmp_path / "longer", longer)
    with pytest.raises(ValueError, match="different budgets"):
        pool([first, tmp_path / "longer"], tmp_path / "out1")

    def other_rates(row):
        return {**row, "method": "alibi", "lr": row["lr"] * 10}

    copy_with(first, tmp_path / "rates", other_rates)
    (tmp_path / "rates" / "selected_lrs.json").write_text(json.dumps({"alibi": 0.01}))
    with pytest.raises(
        ValueError,
        match=r"but alibi \(.*rates\) has \[\[0.01, 0\], \[0.03, 0\]\]; expected the same learning-rate sweep",
    ):
        pool([first, tmp_path / "rates"], tmp_path / "out2")
    # the wider grid pools once cut to the rates both swept, if every chosen rate is among them
    chosen = json.loads((first / "selected_lrs.json").read_text())["nope"]
    copy_with(first, tmp_path / "wider", lambda row: {**row, "method": "alibi"})
    wider = read_rows(tmp_path / "wider" / "sweep.jsonl")
    write_rows(tmp_path / "wider" / "sweep.jsonl", wider + [{**r, "lr": 0.1} for r in wider])
    (tmp_path / "wider" / "selected_lrs.json").write_text(json.dumps({"alibi": chosen}))
    with pytest.raises(ValueError, match="expected the same learning-rate sweep"):
        pool([first, tmp_path / "wider"], tmp_path / "out4")
    pool([first, tmp_path / "wider"], tmp_path / "out4", lrs=[1e-3, 3e-3])
    assert {r["lr"] for r in read_rows(tmp_path / "out4" / "sweep.jsonl")} == {1e-3, 3e-3}
    with pytest.raises(
        ValueError, match=f"nope chose {chosen}, alibi chose {chosen} .*; expected every chosen rate among"
    ):
        pool([first, tmp_path / "wider"], tmp_path / "out5", lrs=[0.1])
    with pytest.raises(ValueError, match="is one of the pooled folders"):
        pool([first], first)
    with pytest.raises(ValueError, match="missing or empty"):
        pool([tmp_path / "nothing"], tmp_path / "out3")
