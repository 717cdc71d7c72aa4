"""``tra run``: a question's runs trained once into the store, reused from the evidence, resumed when interrupted,
each method at the rate its sweep chose; its page written from the rows alone."""

from __future__ import annotations

import json
import re
import shutil
import textwrap

import pytest
import torch

import tra_attn.experiments.engine as engine
import tra_attn.experiments.results_index as results_index
from tests.cli.test_cli import run
from tests.training.test_train import sigint_during
from tra_attn.experiments.identity import run_id
from tra_attn.experiments.registry import experiment as experiment_of
from tra_attn.experiments.store import Evidence, RunStore
from tra_attn.training.checkpoint import list_checkpoints

SPEC = """
from tra_attn.experiments.methods import Method
from tra_attn.experiments.spec import Question

spec = Question(
    title="Tiny: does the pipeline work?",
    task="flipflop",
    preset="tiny",
    methods=(Method("tra"), Method("nope"){more}),
    seeds=(0, 1),
    lrs={lrs},
    sweep_seeds={sweep},
    lrs_source="the tiny preset's one rate",
)
"""


def write_spec(folder, lrs=(1e-3, 3e-3), sweep=(0,), more="", **replace):
    folder.mkdir(parents=True, exist_ok=True)
    text = SPEC.format(lrs=lrs, sweep=sweep, more=more)
    for old, new in replace.items():
        text = text.replace(old, new)
    (folder / "spec.py").write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
def question(tmp_path):
    """A question folder under results/, its evidence beside it, a store of its own."""
    folder = write_spec(tmp_path / "results" / "tiny")
    (tmp_path / "results" / "runs").mkdir()
    return folder


def tra_run(folder, capsys, *flags):
    store = folder.parent.parent / "store"
    return run(["run", folder, "--store", store, "--no-progress", "--no-plots", *flags], capsys)


def test_a_question_trains_its_sweep_then_the_other_seeds_at_the_selected_rate(question, capsys):
    code, out, err = tra_run(question, capsys)
    assert code == 0, err
    records = [Evidence(question.parent / "runs").get(r) for r in Evidence(question.parent / "runs").runs()]
    trained = sorted((r.config["model"]["attention"], r.config["lr"], r.config["seed"]) for r in records)
    page = (question / "README.md").read_text()
    chosen = {kind: lr for kind, lr, seed in trained if seed == 1}
    assert trained == sorted([(k, lr, 0) for k in ("tra", "nope") for lr in (1e-3, 3e-3)] + [
        (k, chosen[k], 1) for k in ("tra", "nope")])  # fmt: skip
    assert page.startswith("# Tiny: does the pipeline work?") and "Command: `tra run results/tiny`" in page
    assert "(chosen from 0.001, 0.003 on seed 0; at an edge)" in page and "## Learning-rate sweep" in page
    store = RunStore(question.parent.parent / "store")
    assert all(list_checkpoints(store.directory(r.run)) and store.get(r.run) for r in records)


def test_a_second_run_trains_nothing_and_the_evidence_alone_rebuilds_the_page(question, capsys, monkeypatch):
    assert tra_run(question, capsys)[0] == 0
    page = (question / "README.md").read_text()
    monkeypatch.setattr(engine, "train", lambda *a, **k: pytest.fail("trained a run the evidence holds"))
    assert tra_run(question, capsys)[0] == 0 and (question / "README.md").read_text() == page
    shutil.rmtree(question.parent.parent / "store")
    (question / "README.md").unlink()
    assert tra_run(question, capsys, "--no-train")[0] == 0 and (question / "README.md").read_text() == page


def test_a_record_that_is_not_its_runs_never_reaches_the_page(question, capsys):
    """NoPE's record written over TRA's (evidence) or copied into TRA's store folder: refused in one line naming the
    file and both ids, the page left as it was."""
    assert tra_run(question, capsys)[0] == 0
    page = (question / "README.md").read_text()
    evidence = Evidence(question.parent / "runs")
    records = [evidence.get(r) for r in evidence.runs()]
    tra, nope = (next(r for r in records if r.config["model"]["attention"] == k) for k in ("tra", "nope"))
    swapped = type(nope)(tra.run, nope.config, nope.commit, nope.validation, nope.tests)
    evidence.path(tra.run).write_text(swapped.to_text())
    code, _, err = tra_run(question, capsys, "--no-train")
    assert code == 2 and err == f"tra: error: {evidence.path(tra.run)}: its config is run {nope.run}'s, not run " \
        f"{tra.run}'s that the record says it holds; expected the record its run wrote (an edited config, or another " \
        "run's record copied here: remove the file, and the run is obtained again)\n"  # fmt: skip
    assert (question / "README.md").read_text() == page
    evidence.path(tra.run).unlink()  # obtained again from the store, where NoPE's record.json was copied over TRA's
    store = RunStore(question.parent.parent / "store")
    shutil.copy(store.directory(nope.run) / "record.json", store.directory(tra.run) / "record.json")
    code, _, err = tra_run(question, capsys, "--no-train")
    assert code == 2 and f"{tra.run}/record.json: holds run {nope.run!r}; expected run {tra.run!r}" in err
    assert (question / "README.md").read_text() == page


def test_a_record_lacking_the_evaluation_is_evaluated_again_from_the_store(question, capsys, monkeypatch):
    assert tra_run(question, capsys)[0] == 0
    evidence = Evidence(question.parent / "runs")
    one = evidence.get(evidence.runs()[0])
    evidence.put(type(one)(one.run, one.config, one.commit, one.validation, {}))
    (question.parent.parent / "store" / one.run / "record.json").unlink()
    checkpoints = list_checkpoints(question.parent.parent / "store" / one.run)
    assert tra_run(question, capsys)[0] == 0
    assert evidence.get(one.run).tests == one.tests and evidence.get(one.run).commit == one.commit
    assert list_checkpoints(question.parent.parent / "store" / one.run) == checkpoints  # evaluated, not trained


def test_without_training_the_missing_runs_are_named_and_nothing_is_written(question, capsys):
    code, _, err = tra_run(question, capsys, "--no-train")
    assert code == 2 and "4 run(s) are in neither the evidence nor the store: TRA lr=0.001 seed=0" in err
    assert not (question / "README.md").exists() and Evidence(question.parent / "runs").runs() == []
    code, out, _ = tra_run(question, capsys, "--plan")
    assert code == 0 and "4 run(s) to train" in out and "NoPE lr=0.003 seed=0" in out


def test_a_partial_page_shows_whole_methods_and_says_what_is_missing(question, capsys):
    """Without one of NoPE's sweep runs, NoPE gets no rate (none is chosen from part of a grid), its seed 1 waits
    for it, and the page of the runs that are in shows TRA alone and says so at its top; the index follows."""
    (question.parent / "README.md").write_text(f"# Results\n\n{results_index.START}\n{results_index.END}\n")
    assert tra_run(question, capsys)[0] == 0
    whole = (question / "README.md").read_text()
    evidence = Evidence(question.parent / "runs")
    records = [evidence.get(r) for r in evidence.runs()]
    dropped = next(r for r in records if r.config["model"]["attention"] == "nope" and r.config["lr"] == 3e-3
                   and r.config["seed"] == 0)  # fmt: skip
    evidence.path(dropped.run).unlink()
    shutil.move(question.parent.parent / "store", question.parent.parent / "elsewhere")
    code, out, _ = tra_run(question, capsys, "--plan")
    assert code == 0 and out.splitlines()[1:] == [f"  NoPE lr=0.003 seed=0 on flipflop ({dropped.run})"]
    code, _, err = tra_run(question, capsys, "--no-train")
    assert code == 2 and "1 run(s) are in neither the evidence nor the store" in err
    assert (question / "README.md").read_text() == whole  # refused without --partial: the whole page stays
    code, out, _ = tra_run(question, capsys, "--no-train", "--partial")
    page = (question / "README.md").read_text()
    assert code == 0 and "(partial: 4 of 6 runs)" in out
    assert "Status: current; partial: 4 of 6 runs" in page
    assert "| flipflop | NoPE | 1 of 3 | 2 |" in page and "\n| TRA |" in page and "\n| NoPE |" not in page
    index = (question.parent / "README.md").read_text()
    assert "| [tiny](tiny/README.md): Tiny: does the pipeline work? | current, partial: 4 of 6 runs |" in index
    shutil.move(question.parent.parent / "elsewhere", question.parent.parent / "store")
    assert tra_run(question, capsys)[0] == 0  # the store still holds the run: the page is whole again
    assert (question / "README.md").read_text() == whole
    index = (question.parent / "README.md").read_text()
    assert "| [tiny](tiny/README.md): Tiny: does the pipeline work? | current |" in index


def test_an_interrupted_run_resumes_in_the_store(question, capsys, monkeypatch):
    write_spec(question, lrs=(3e-3,), sweep=())
    sigint_during(monkeypatch, torch.optim.AdamW, "step", 12)
    code, _, err = tra_run(question, capsys)
    assert code == 130 and "interrupted after step" in err and "; run the same command again to continue" in err
    monkeypatch.undo()
    assert Evidence(question.parent / "runs").runs() == []
    assert tra_run(question, capsys)[0] == 0
    records = [Evidence(question.parent / "runs").get(r) for r in Evidence(question.parent / "runs").runs()]
    assert len(records) == 4
    straight = question.parent.parent / "straight"
    write_spec(straight, lrs=(3e-3,), sweep=())
    (straight.parent / "runs").mkdir(exist_ok=True)
    assert run(["run", straight, "--store", straight.parent / "store2", "--no-progress", "--no-plots"], capsys)[0] == 0
    again = {r: Evidence(straight.parent / "runs").get(r) for r in Evidence(straight.parent / "runs").runs()}
    assert all(again[r.run].tests == r.tests for r in records)  # the resumed run computed what a straight one did


def test_a_run_the_store_holds_under_another_name_is_reused(question, capsys):
    """Two questions asking for the same config share its run: the second trains nothing."""
    assert tra_run(question, capsys)[0] == 0
    other = write_spec(question.parent / "other", more=', Method("tra", label="TRA again")', **{
        'Method("tra"), ': ""})  # fmt: skip
    shutil.rmtree(question.parent / "runs")
    (question.parent / "runs").mkdir()
    store = RunStore(question.parent.parent / "store")
    before = sorted(p.name for p in store.root.iterdir())
    assert tra_run(other, capsys)[0] == 0
    assert sorted(p.name for p in store.root.iterdir()) == before
    assert "| TRA again |" in (other / "README.md").read_text()


def test_a_diverging_rate_is_recorded_as_diverged_and_never_selected(question, capsys):
    write_spec(question, lrs=(3e-3, 1e9))
    assert tra_run(question, capsys)[0] == 0
    page = (question / "README.md").read_text()
    assert re.search(r"^\| TRA( †)? \| 0.003 \| 2 \|", page, re.M)
    assert re.search(r"^\| TRA \| [0-9.]+ \| diverged \| 0.003 \|$", page, re.M)
    records = [Evidence(question.parent / "runs").get(r) for r in Evidence(question.parent / "runs").runs()]
    assert {r.config["lr"] for r in records if r.diverged} == {1e9}


def test_a_method_without_a_rate_is_refused_by_name_before_any_work(question, capsys):
    write_spec(question, lrs=(), sweep=(), **{'preset="tiny"': 'preset="cpu"', "    lrs_source=": "    # ",
               'Method("nope")': 'Method("tra", options={"local_window": 3})'})  # fmt: skip
    code, _, err = tra_run(question, capsys)
    assert code == 2 and "TRA (local_window=3): the 'cpu' preset has no learning rate chosen on validation" in err
    assert Evidence(question.parent / "runs").runs() == []


def test_evaluation_positions_too_few_for_the_test_splits_are_refused_before_any_work(question, capsys):
    """The flip-flop test splits of the tiny preset reach 8x its 16 tokens: a range of 64 would be refused at the
    first long split, after every run had trained."""
    drawn = ', Method("rope", options={"random_positions": 64, "random_positions_at_eval": True})'
    write_spec(question, more=drawn)
    code, _, err = tra_run(question, capsys)
    assert code == 2 and "random_positions = 64 with random_positions_at_eval, but the flipflop test" in err
    assert "expected random_positions >= 128" in err
    assert Evidence(question.parent / "runs").runs() == [] and not (question.parent.parent / "store").exists()


def test_a_kind_registered_outside_the_package_joins_a_question_with_one_line(question, capsys):
    """docs/model.md's own kind, added to a copy of a spec."""
    from tra_attn import AttentionKind, register_attention
    from tra_attn.layers import unregister_attention

    from .test_harness import HalfScaleNoPE

    register_attention(AttentionKind("half_scale_nope", HalfScaleNoPE))
    try:
        write_spec(question, more=', Method("half_scale_nope", options={"factor": 0.25})')
        assert tra_run(question, capsys)[0] == 0
        page = (question / "README.md").read_text()
        assert "| half_scale_nope (factor=0.25) | `half_scale_nope` | factor=0.25 |" in page
    finally:
        unregister_attention("half_scale_nope")


def test_the_store_refuses_a_folder_of_another_run(question, capsys):
    assert tra_run(question, capsys)[0] == 0
    evidence, store = Evidence(question.parent / "runs"), RunStore(question.parent.parent / "store")
    one, two = evidence.runs()[:2]
    (store.directory(one) / "record.json").unlink()
    shutil.copy(store.directory(two) / "train_config.json", store.directory(one) / "train_config.json")
    evidence.path(one).unlink()
    code, _, err = tra_run(question, capsys)
    assert code == 2 and f"holds a run of another config; expected run {one}" in err


def test_run_ids_follow_the_config_not_the_label(question):
    from tra_attn.experiments.engine import run_config
    from tra_attn.experiments.flipflop import FLIPFLOP
    from tra_attn.experiments.methods import Method
    from tra_attn.experiments.spec import load_spec

    spec = load_spec(question)
    one = run_config(FLIPFLOP, spec, Method("tra"), 1e-3, 0)
    two = run_config(FLIPFLOP, spec, Method("tra", label="renamed"), 1e-3, 0)
    assert run_id(one) == run_id(two) and json.dumps(one.to_dict()) == json.dumps(two.to_dict())


def test_an_aid_given_to_every_method_keeps_a_given_label_so_ranges_read_as_one_row():
    from tra_attn.experiments.methods import Method, randomized, with_aid

    plain, aided = with_aid((Method("fox"),), length_spread=0.75)
    assert (plain.label, aided.label, aided.train) == ("FoX", "FoX (length_spread=0.75)", {"length_spread": 0.75})
    short, long = (with_aid((randomized("rope", n),), length_spread=0.75)[1] for n in (512, 1024))
    assert short.label == long.label == "RoPE, randomized positions (length_spread=0.75)"
    assert short.signature != long.signature and long.options == {"random_positions": 1024}


def test_a_page_of_matched_parameters_shows_each_mlp_width(tmp_path, capsys):
    folder = write_spec(tmp_path / "results" / "matched", lrs=(3e-3,), sweep=(), more=', Method("fox_pro")',
                        **{"    lrs_source": '    match_parameters=Method("tra"),\n    lrs_source'})  # fmt: skip
    (tmp_path / "results" / "runs").mkdir()
    code, _, err = tra_run(folder, capsys)
    assert code == 0, err
    page = (folder / "README.md").read_text()
    rows = {line.split(" | ")[0][2:]: line for line in page.splitlines() if line.startswith("| ") and "`" in line}
    widths = {label: int(re.search(r"\(MLP (\d+)\)", row).group(1)) for label, row in rows.items()}
    counts = {label: int(re.search(r"\| ([\d,]+) \(MLP", row).group(1).replace(",", "")) for label, row in rows.items()}
    assert set(widths) == {"TRA", "NoPE", "FoX Pro"} and widths["FoX Pro"] < widths["TRA"] < widths["NoPE"]
    assert all(abs(count - counts["TRA"]) <= 0.02 * counts["TRA"] for count in counts.values())
    assert "Matched: every method's MLP width (in brackets) brings it within 2% of TRA's count" in page


def test_an_extended_grid_sweeps_beyond_its_edge_until_the_choice_is_inside(question, capsys):
    write_spec(question, lrs=(1e-3, 3e-3), **{"    lrs_source": "    extend_grid=True,\n    lrs_source"})
    code, out, _ = tra_run(question, capsys, "--plan")
    assert code == 0 and "4 run(s) to train" in out  # the extension waits for the sweep it extends
    code, _, err = tra_run(question, capsys)
    assert code == 0, err
    evidence = Evidence(question.parent / "runs")
    records = [evidence.get(r) for r in evidence.runs()]
    page = (question / "README.md").read_text()
    flipflop = experiment_of("flipflop")
    for kind, label in (("tra", "TRA"), ("nope", "NoPE")):
        swept = sorted({r.config["lr"] for r in records if r.config["model"]["attention"] == kind
                        and r.config["seed"] == 0})  # fmt: skip
        assert {1e-3, 3e-3} <= set(swept) and len(swept) > 2  # the tiny preset fits nothing: an edge extends
        rows = [{**row, "method": label, "lr": r.config["lr"]} for r in records if r.config["seed"] == 0
                and r.config["model"]["attention"] == kind for row in r.validation]  # fmt: skip
        added = (sum(lr < 1e-3 for lr in swept), sum(lr > 3e-3 for lr in swept))
        assert flipflop.next_rate(rows, tuple(swept), added) is None  # settled: nothing more to add
        cell = next(line for line in page.splitlines() if line.startswith(f"| {label} | `{kind}`"))
        assert f"chosen from {', '.join(f'{lr:g}' for lr in swept)} on seed 0; added " in cell
    assert "Extended grids: where the chosen rate sat at an edge of its grid and did not fit" in page
    assert tra_run(question, capsys, "--plan")[1].startswith(f"{question}: 0 run(s) to train")
