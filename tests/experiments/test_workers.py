"""``tra run --jobs N``: a question's runs on several workers (local processes, or jobs of submitit's local
executor, the path SLURM jobs take), each run trained once, a stopped worker's run resumed by the next."""

from __future__ import annotations

import json
import time

import pytest

from tests.experiments.test_engine import tra_run, write_spec
from tra_attn.experiments import workers
from tra_attn.experiments.store import Evidence, RunStore
from tra_attn.training.checkpoint import latest_checkpoint

submitit = pytest.importorskip("submitit")
pytestmark = pytest.mark.integration


@pytest.fixture
def question(tmp_path):
    folder = write_spec(tmp_path / "results" / "tiny")
    (tmp_path / "results" / "runs").mkdir()
    return folder


def train_steps(directory) -> list[int]:
    """The steps a run's training validated at (every 10 steps), in order: a run trained twice, or restarted,
    logs a step twice."""
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [row["step"] for row in map(json.loads, lines) if "val_loss" in row]


def check_each_run_trained_once(question, expected: int) -> None:
    evidence = Evidence(question.parent / "runs")
    store = RunStore(question.parent.parent / "store")
    assert len(evidence.runs()) == expected
    for run in evidence.runs():
        steps = train_steps(store.directory(run))
        assert steps == sorted(set(steps)) and steps[-1] == 20, run


@pytest.mark.parametrize("executor", ["processes", "submitit-local"])
def test_two_workers_train_a_question_in_waves_each_run_once(question, capsys, executor):
    code, out, err = tra_run(question, capsys, "--jobs", "2", "--executor", executor)
    assert code == 0, err
    waves = [line for line in out.splitlines() if ": training " in line]
    assert [w.split(": training ")[1].split(" run(s)")[0] for w in waves] == ["4", "2"]  # the sweep, then seed 1
    assert out.count("done: ") == 6 and (question / "README.md").is_file()
    check_each_run_trained_once(question, 6)
    page = (question / "README.md").read_text()
    assert tra_run(question, capsys, "--jobs", "2", "--executor", executor)[1].count("done: ") == 0  # all in
    assert (question / "README.md").read_text() == page


def test_a_stopped_worker_leaves_its_run_to_the_next_and_two_workers_on_one_run_train_it_once(tmp_path):
    folder = write_spec(tmp_path / "results" / "one", lrs=(3e-3,), sweep=(), **{
        'Method("nope")': "", "seeds=(0, 1),": "seeds=(0,),\n    steps=1500,"})  # fmt: skip
    evidence, store = tmp_path / "results" / "runs", RunStore(tmp_path / "store")
    (run,), _ = workers.plan(folder / "spec.py", store, evidence)
    job = workers.Job(str(folder / "spec.py"), run.id, str(store.root), str(evidence), "cpu", 1, run.describe())
    executor = submitit.AutoExecutor(folder=tmp_path / "logs", cluster="local")
    executor.update_parameters(timeout_min=10)
    first = executor.submit(workers.train_job, job)
    deadline = time.monotonic() + 120
    while latest_checkpoint(store.directory(run.id)) is None:
        assert time.monotonic() < deadline and not first.done(), first.stderr()
        time.sleep(0.05)
    first.cancel()
    while not first.done():
        time.sleep(0.05)
    assert Evidence(evidence).runs() == [] and store.get(run.id) is None  # stopped: no record
    stopped_at = train_steps(store.directory(run.id))[-1]
    assert stopped_at < 1500
    with executor.batch():
        pair = [executor.submit(workers.train_job, job) for _ in range(2)]
    assert [p.result() for p in pair] == [run.id, run.id]
    trained = [p for p in pair if f"-> {store.directory(run.id)}" in p.stdout()]
    assert len(trained) == 1  # the other waited for the lock, or found the record
    steps = train_steps(store.directory(run.id))
    assert steps == sorted(set(steps)) and steps[-1] == 1500  # resumed where the first stopped, not restarted
    assert Evidence(evidence).get(run.id).config == store.get(run.id).config


def test_a_worker_that_fails_names_its_run_and_the_error_in_one_line(question, capsys):
    """A store folder holding another run's config: the worker's error comes back to the command, by run, and the
    runs beside it still finish."""
    from tra_attn.experiments.store import RunStore

    store = RunStore(question.parent.parent / "store")
    runs, _ = workers.plan(question / "spec.py", store, question.parent / "runs")
    foreign = store.directory(runs[0].id)
    foreign.mkdir(parents=True)
    (foreign / "train_config.json").write_text(json.dumps(runs[1].config.to_dict()))
    code, _, err = tra_run(question, capsys, "--jobs", "2")
    assert code == 2 and err.count("\n") == 1
    assert (
        f"tra: error: {runs[0].describe()} ({runs[0].id}): ValueError: {foreign} holds a run of another config" in err
    )
    assert err.rstrip().endswith("run the same command again to continue")
    assert len(Evidence(question.parent / "runs").runs()) == 3  # the sweep's other runs
