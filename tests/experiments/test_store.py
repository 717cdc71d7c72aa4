"""A run's identity, its record, the evidence and the store: what a run is stored under, and how it is kept."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tra_attn import ModelConfig
from tra_attn.experiments.identity import identity, run_id
from tra_attn.experiments.store import RECORD_NAME, Evidence, Record, RunStore, default_store, lean, read_record
from tra_attn.training import TrainConfig


def config(**changes) -> TrainConfig:
    model = changes.pop("model", {})
    base = dict(task="flipflop", length=16, steps=20, batch_size=8, lr=3e-3, seed=0)
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, **model)
    return TrainConfig(**{**base, **changes}, model=model)


def test_bookkeeping_and_the_device_index_do_not_change_the_identity():
    base = run_id(config())
    assert run_id(config(log_every=1, checkpoint_every=3)) == base
    assert run_id(config(device="cpu")) == base
    assert run_id(config(steps=21)) != base and run_id(config(seed=1)) != base and run_id(config(lr=1e-3)) != base


def test_a_config_spelled_with_its_defaults_has_the_identity_of_one_without():
    """Task parameters, model fields and attention options at their defaults are left out: a field added later
    with a default that keeps the old behaviour leaves every existing identity unchanged."""
    explicit = config(task_args={"p_ignore": 0.8}, model={"attention_options": {"threshold": 0.0, "local_window": 0}})
    assert run_id(explicit) == run_id(config())
    assert "task_args" not in identity(config()) and identity(config())["model"]["attention_options"] == {}
    assert run_id(config(model={"attention_options": {"local_window": 4}})) != run_id(config())
    assert run_id(config(task_args={"p_ignore": 0.9})) != run_id(config())


def test_the_identity_keeps_what_a_reader_needs_even_at_its_default():
    found = identity(config())
    assert {"task", "seed", "lr", "steps"} <= set(found) and found["model"]["attention"] == "tra"


RUN = run_id(config())


def record(run: str = RUN, **tests) -> Record:
    validation = [{"split": "validation", "length": 16, "metric": "full_seq_acc", "value": 0.5}]
    evaluated = {key: {"commit": "c2", "rows": rows} for key, rows in tests.items()}
    return Record(run, config().to_dict(), "c1", validation, evaluated)


def test_a_record_round_trips_through_its_file_with_one_row_per_line(tmp_path):
    rows = [{"split": "iid", "length": 16, "metric": "full_seq_acc", "value": math.nan}]
    evidence = Evidence(tmp_path / "runs")
    evidence.put(record(**{"sequences=8": rows}))
    text = evidence.path(RUN).read_text()
    lines = [line.strip().rstrip(",") for line in text.splitlines()]
    assert json.dumps(record().validation[0]) in lines and json.dumps(rows[0]) in lines and evidence.runs() == [RUN]
    back = evidence.get(RUN)
    assert back.tests["sequences=8"]["rows"][0]["value"] != back.tests["sequences=8"]["rows"][0]["value"]  # NaN
    assert dataclasses.replace(back, tests={}) == dataclasses.replace(record(), tests={})
    assert back.covers("sequences=8") and not back.covers("sequences=9") and back.commits("sequences=8") == ["c1", "c2"]


def test_a_record_gains_evaluations_and_a_diverged_one_is_final():
    merged = record(**{"sequences=8": []}).merged(record(**{"sequences=9": []}))
    assert sorted(merged.tests) == ["sequences=8", "sequences=9"]
    diverged = Record(RUN, {}, "c1", [{"split": "validation", "length": 16, "metric": "diverged", "value": 3}])
    assert diverged.diverged and diverged.covers("sequences=8") and diverged.rows("sequences=8") == diverged.validation


def test_a_file_that_is_not_the_record_it_names_is_refused(tmp_path):
    evidence = Evidence(tmp_path)
    evidence.put(record())
    (tmp_path / "other.json").write_text(evidence.path(RUN).read_text())
    with pytest.raises(ValueError, match=f"holds run '{RUN}'; expected run 'other'"):
        read_record(tmp_path / "other.json")
    for text, message in [("{", "not valid JSON"), ("[1]", "a JSON list; expected a run record"),
                          (json.dumps({"run": "bad"}), "not a run record")]:  # fmt: skip
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match=f"bad.json: {message}"):
            read_record(tmp_path / "bad.json")
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        read_record(tmp_path / "bad.json")
    assert evidence.get("missing") is None


def test_a_record_whose_config_is_not_its_runs_is_refused_wherever_it_is_read(tmp_path):
    """An edited config, a record copied into another run's place (store or evidence): refused, naming the file and
    both ids, never read as the run it is filed under."""
    other = run_id(config(seed=1))
    evidence, store = Evidence(tmp_path / "runs"), RunStore(tmp_path / "store")
    edited = dataclasses.replace(record(), config=config(lr=1e-3).to_dict())
    evidence.put(edited)
    with pytest.raises(ValueError, match=f"{RUN}.json: its config is run {run_id(config(lr=1e-3))}'s, not run {RUN}"):
        evidence.get(RUN)
    store.directory(other).mkdir(parents=True)
    store.directory(RUN).mkdir(parents=True)
    store.put(record())
    (store.directory(RUN) / RECORD_NAME).rename(store.directory(other) / RECORD_NAME)  # copied to another run
    with pytest.raises(ValueError, match=f"{other}/record.json: holds run '{RUN}'; expected run '{other}'"):
        store.get(other)
    relabelled = dataclasses.replace(record(), run=other)  # the run's id rewritten to the place's too
    store.put(relabelled)
    with pytest.raises(ValueError, match=f"its config is run {RUN}'s, not run {other}'s"):
        store.get(other)
    with pytest.raises(ValueError, match="config = 'x'; expected the run's training config"):
        evidence.put(dataclasses.replace(record(), config="x"))
        evidence.get(RUN)


def test_the_store_is_the_flag_then_the_environment_then_the_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TRA_STORE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_store() == tmp_path / "cache" / "tra" / "runs"
    monkeypatch.setenv("TRA_STORE", str(tmp_path / "store"))
    assert RunStore().root == tmp_path / "store" and RunStore(tmp_path / "flag").root == tmp_path / "flag"
    store = RunStore(tmp_path / "flag")
    store.directory(RUN).mkdir(parents=True)
    store.put(record())
    assert store.get(RUN).commit == "c1"


def test_lean_rows_drop_what_their_record_says_once():
    row = {"task": "lm", "method": "tra", "seed": 0, "lr": 1e-3, "config": {}, "commit": "c", "run": "x"}
    assert lean({**row, "split": "iid", "length": 8, "metric": "loss", "value": 1.0, "factor": 2}) == {
        "split": "iid", "length": 8, "metric": "loss", "value": 1.0, "factor": 2,
    }  # fmt: skip
