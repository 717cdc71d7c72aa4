"""Train to fit (TrainConfig.fit_accuracy): stop at the first validation that reaches it, record the step,
resume as a no-op; validation of the field, conversion of version-3 configs (`tra upgrade`), and the CLI flag."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import TINY_TRAIN
from tra_attn import ModelConfig, TransformerLM
from tra_attn.cli import main
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import list_checkpoints, load_train_state
from tra_attn.training.config import VERSION
from tra_attn.training.validator import VALIDATION_SEED, validate
from tra_attn.upgrade.configs import upgrade_train_config
from tra_attn.utils.dataclass_io import OldVersion
from tra_attn.utils.jsonl import read_jsonl

FIT = 0.6  # well above the first validation's full-sequence accuracy, reached a few validations later
EVAL_EVERY = 10


def small(**overrides) -> TrainConfig:
    model = ModelConfig(vocab_size=6, d_model=32, n_layers=1, n_heads=2, attention="tra")
    base = dict(
        task="flipflop",
        task_args={"p_ignore": 0.5, "final_read": True},
        model=model,
        length=16,
        steps=60,
        batch_size=16,
        lr=1e-2,
        log_every=5,
        eval_every=EVAL_EVERY,
        eval_sequences=64,
        checkpoint_every=25,
    )
    return TrainConfig(**{**base, **overrides})


def rows(run_dir, key):
    """The metrics rows that have ``key``, without their wall-clock times."""
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in read_jsonl(run_dir / "metrics.jsonl") if key in r]


def step_of(checkpoint) -> int:
    return load_train_state(checkpoint)[1]["step"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same run twice, trained to fit and for all its steps: {name: (run dir, returned checkpoint)}."""
    out = {}
    for name, fit in (("fitted", FIT), ("full", 0.0)):
        run_dir = tmp_path_factory.mktemp(name)
        out[name] = (run_dir, train(small(fit_accuracy=fit), run_dir, progress=False))
    return out


def test_a_run_stops_at_the_first_validation_that_reaches_fit_accuracy(runs):
    run_dir, checkpoint = runs["fitted"]
    config = small(fit_accuracy=FIT)
    fit_step = load_train_state(checkpoint)[1]["fit_step"]
    assert step_of(checkpoint) == fit_step < config.steps
    assert fit_step % EVAL_EVERY == 0
    assert [step_of(c) for c in list_checkpoints(run_dir)] == [fit_step]  # saved at the fit, not before
    assert rows(run_dir, "fit_step") == [{"step": fit_step, "fit_step": fit_step}]
    validations = rows(run_dir, "val_full_seq_acc")
    assert validations[-1]["step"] == fit_step and validations[-1]["val_full_seq_acc"] >= FIT
    assert len(validations) > 1  # the fit is not the first validation, so the next check means something
    assert all(r["val_full_seq_acc"] < FIT for r in validations[:-1])
    assert max(r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")) == fit_step  # nothing trained after


def test_the_fitted_run_matches_the_full_run_up_to_its_fit(runs):
    (fitted, checkpoint), (full, _) = runs["fitted"], runs["full"]
    fit_step = load_train_state(checkpoint)[1]["fit_step"]
    full_validations = rows(full, "val_full_seq_acc")
    first_reach = next(r["step"] for r in full_validations if r["val_full_seq_acc"] >= FIT)
    assert fit_step == first_reach
    assert rows(fitted, "loss") == [r for r in rows(full, "loss") if r["step"] <= fit_step]
    assert rows(fitted, "val_full_seq_acc") == [r for r in full_validations if r["step"] <= fit_step]


def test_the_fit_checkpoint_holds_the_validated_model(runs):
    run_dir, checkpoint = runs["fitted"]
    config = small(fit_accuracy=FIT)
    task = config.task_instance()
    batch = task.validation(config.eval_sequences, config.length, VALIDATION_SEED + config.seed)
    got = validate(TransformerLM.from_pretrained(checkpoint), config, batch, task.metrics)
    assert got["full_seq_acc"] == rows(run_dir, "val_full_seq_acc")[-1]["val_full_seq_acc"] >= FIT


def test_fit_accuracy_zero_trains_every_step(runs):
    run_dir, checkpoint = runs["full"]
    steps = small().steps
    assert step_of(checkpoint) == steps
    assert all("fit_step" not in load_train_state(c)[1] for c in list_checkpoints(run_dir))
    assert rows(run_dir, "fit_step") == []
    assert rows(run_dir, "loss")[-1]["step"] == steps
    assert any(r["val_full_seq_acc"] >= FIT for r in rows(run_dir, "val_full_seq_acc"))  # it would have fitted


def test_resuming_a_fitted_run_trains_nothing(runs, capsys):
    run_dir, checkpoint = runs["fitted"]
    metrics = (run_dir / "metrics.jsonl").read_text()
    checkpoints = list_checkpoints(run_dir)
    again = train(small(fit_accuracy=FIT), run_dir, resume=True, progress=False)
    assert again == checkpoint
    assert list_checkpoints(run_dir) == checkpoints
    assert (run_dir / "metrics.jsonl").read_text() == metrics
    fit_step = load_train_state(checkpoint)[1]["fit_step"]
    assert load_train_state(again)[1]["fit_step"] == fit_step
    assert f"the run fitted at step {fit_step}" in capsys.readouterr().out


def test_an_unreached_fit_accuracy_trains_to_the_cap(tmp_path):
    checkpoint = train(small(fit_accuracy=1.0, steps=12), tmp_path, progress=False)
    assert step_of(checkpoint) == 12
    assert "fit_step" not in load_train_state(checkpoint)[1]
    assert rows(tmp_path, "fit_step") == []
    validations = rows(tmp_path, "val_full_seq_acc")
    assert [r["step"] for r in validations] == [10, 12]  # the cap is validated too
    assert all(r["val_full_seq_acc"] < 1.0 for r in validations)


def test_reaching_fit_accuracy_exactly_counts(tmp_path):
    scores = iter([0.49, 0.5, 0.9])  # the validations' full-sequence accuracies, in order

    def metrics(model, batch):
        return {"full_seq_acc": next(scores)}

    checkpoint = train(small(fit_accuracy=0.5), tmp_path, progress=False, metrics_fn=metrics)
    assert load_train_state(checkpoint)[1]["fit_step"] == step_of(checkpoint) == 2 * EVAL_EVERY
    assert [r["val_full_seq_acc"] for r in rows(tmp_path, "val_full_seq_acc")] == [0.49, 0.5]


def test_validation_without_full_seq_acc_is_refused_at_the_first_validation(tmp_path):
    def metrics(model, batch):  # like the lm task's: no per-sequence score
        return {"loss": 1.0}

    with pytest.raises(ValueError, match=r"TrainConfig\.fit_accuracy = 0\.5: .*no full_seq_acc"):
        train(small(fit_accuracy=0.5), tmp_path / "on", progress=False, metrics_fn=metrics)
    assert max(r["step"] for r in read_jsonl(tmp_path / "on" / "metrics.jsonl")) == EVAL_EVERY
    assert list_checkpoints(tmp_path / "on") == []
    assert step_of(train(small(), tmp_path / "off", progress=False, metrics_fn=metrics)) == small().steps  # 0: off


@pytest.mark.parametrize("value", [-0.1, 1.5, True, "0.9", float("nan")])
def test_bad_fit_accuracy(value):
    with pytest.raises(ValueError, match=r"TrainConfig\.fit_accuracy"):
        small(fit_accuracy=value)


def test_fit_accuracy_needs_periodic_validation():
    with pytest.raises(ValueError, match=r"eval_every"):
        small(fit_accuracy=0.9, eval_every=0)
    assert small(fit_accuracy=0.0, eval_every=0).fit_accuracy == 0.0  # off: no validation needed


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, 1.0])
def test_fit_accuracy_accepts_the_closed_unit_interval(value):
    assert small(fit_accuracy=value).fit_accuracy == value


def test_a_version_3_config_loads_with_fit_accuracy_zero():
    data = small(fit_accuracy=0.5).to_dict()
    assert data["version"] == VERSION and data["fit_accuracy"] == 0.5
    v3 = {**data, "version": 3}
    del v3["fit_accuracy"]
    with pytest.raises(OldVersion, match=r"TrainConfig version 3, written by an earlier version of tra"):
        TrainConfig.from_dict(v3)
    loaded = TrainConfig.from_dict(upgrade_train_config(v3))
    assert loaded.fit_accuracy == 0.0
    assert loaded == small()
    with pytest.raises(ValueError, match=r"missing fields \['fit_accuracy'\]"):
        TrainConfig.from_dict({**v3, "version": VERSION})  # a current file must have it


def test_cli_train_accepts_fit_accuracy(tmp_path, capsys):
    argv = ["train", "--out", tmp_path, *TINY_TRAIN, "--fit-accuracy", "0.3"]
    assert main([str(a) for a in argv]) == 0
    capsys.readouterr()
    saved = json.loads((tmp_path / "train_config.json").read_text())
    assert saved["version"] == VERSION and saved["fit_accuracy"] == 0.3
