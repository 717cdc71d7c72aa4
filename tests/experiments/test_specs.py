"""The committed evidence: every page under results/ rebuilds from the committed run records, line for line; every
record is read by some page; the presets' validated learning rates are the ones their questions select."""

from __future__ import annotations

from pathlib import Path

import pytest

from tra_attn.experiments.engine import Source, gather
from tra_attn.experiments.registry import experiments
from tra_attn.experiments.results_index import indexed
from tra_attn.experiments.run import build_page
from tra_attn.experiments.spec import Question, load_spec
from tra_attn.experiments.store import Evidence, RunStore

RESULTS = Path(__file__).parents[2] / "results"
SPECS = sorted(RESULTS.rglob("spec.py"))
EVIDENCE = RESULTS / "runs"


def name(spec: Path) -> str:
    return spec.parent.relative_to(RESULTS).as_posix()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Every spec's page from the evidence alone: no store, no training, no plots; a question that lacks runs gets
    its partial page."""
    store = RunStore(tmp_path_factory.mktemp("no_store"))
    return {name(spec): build_page(spec, store, EVIDENCE, plots=False, partial=True) for spec in SPECS}


def test_there_are_questions_and_at_most_forty_folders():
    assert len(SPECS) >= 20
    assert len([p for p in RESULTS.iterdir() if p.is_dir()]) <= 40


@pytest.mark.parametrize("question", [name(spec) for spec in SPECS])
def test_the_committed_page_rebuilds_from_the_committed_rows_line_for_line(pages, question):
    """A partial page too: it says how many runs it lacks, so a record removed from a whole page fails here."""
    page = pages[question]
    assert page.text, f"{question}: runs missing from results/runs: {[run.id for run in page.missing][:5]}"
    committed = (RESULTS / question / "README.md").read_text().splitlines()
    assert page.text.splitlines() == committed


def test_every_committed_record_is_read_by_a_page(pages):
    read = set().union(*(page.runs for page in pages.values()))
    assert sorted(set(Evidence(EVIDENCE).runs()) - read) == []


def test_every_record_is_stored_under_the_identity_of_its_config():
    from tra_attn.experiments.identity import run_id
    from tra_attn.training import TrainConfig

    evidence = Evidence(EVIDENCE)
    wrong = [r for r in evidence.runs() if run_id(TrainConfig.from_dict(evidence.get(r).config)) != r]
    assert wrong == []


def current_questions() -> list[Question]:
    found = [load_spec(spec) for spec in SPECS]
    return [q for q in found if isinstance(q, Question) and q.status == "current"]


def test_the_presets_validated_rates_are_the_ones_their_questions_select(tmp_path):
    """A preset's rate for a method is the selection of a current question that sweeps that method under the
    preset's own budget; every validated rate has one. (A method of a partial page has selected nothing yet.)"""
    source = Source(Evidence(EVIDENCE), RunStore(tmp_path), train=False)
    selected: dict[tuple[str, str, str], set[float]] = {}
    for question in current_questions():
        if question.steps is not None or question.fit_accuracy is not None or question.task_args:
            continue  # another budget than the preset's
        for task in question.tasks:
            results = gather(question, task, source)
            for method in question.methods:
                if len(results.grids[method.label]) > 1 and method.label not in results.lacking:
                    key = (task, question.preset, method.signature)
                    selected.setdefault(key, set()).add(results.selected[method.label])
    for task, experiment in experiments().items():
        for preset_name, preset in experiment.presets.items():
            for method, rate in preset.lrs.items():
                chosen = selected.get((task, preset_name, method.signature))
                assert chosen == {rate}, f"{task} {preset_name} {method.label}: preset {rate}, questions {chosen}"


def test_the_results_index_is_the_one_its_specs_and_pages_give():
    readme = (RESULTS / "README.md").read_text()
    assert indexed(readme, RESULTS) == readme
    for spec in SPECS:
        assert f"[{name(spec)}]({name(spec)}/README.md): {load_spec(spec).title} |" in readme
