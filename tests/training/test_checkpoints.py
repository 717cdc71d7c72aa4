"""Checkpoints under hostile conditions: foreign or truncated files, kill -9 leftovers, a corrupt latest
checkpoint, non-finite weights, extending a finished run. Every refusal names the file, what was wrong and
what was expected."""

from __future__ import annotations

import pickle
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.cli.test_cli import TINY_TRAIN
from tests.cli.test_cli import run as tra
from tests.conftest import sharing_kinds
from tests.training.test_train import tiny, weights
from tra_attn import ModelConfig, TransformerLM
from tra_attn.models.config import VERSION as MODEL_VERSION
from tra_attn.training import train
from tra_attn.training.checkpoint import list_checkpoints, load_train_state, resolve_checkpoint


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("finished")
    train(tiny(), run, progress=False)
    return run


@pytest.fixture
def run(finished_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def latest(run):
    return list_checkpoints(run)[-1]


class Foreign:
    """Anything but a tensor dict: weights-only loading must refuse it."""


@pytest.mark.parametrize(
    "write,pattern",
    [
        (lambda p: torch.save({"step": 8}, p), r"train_state\.pt lacks \['optimizer', 'rng'\]; expected a dict with"),
        (lambda p: torch.save([1, 2], p), r"train_state\.pt lacks \['optimizer', 'rng', 'step'\]"),
        (lambda p: p.write_bytes(pickle.dumps(Foreign())), r"train_state\.pt is not a training state written by"),
        (lambda p: p.write_bytes(p.read_bytes()[:100]), r"train_state\.pt is not a training state written by"),
        (lambda p: p.write_bytes(b""), r"train_state\.pt is not a training state written by"),
        (lambda p: p.unlink(), r"train_state\.pt is missing; expected the training state"),
        (lambda p: (p.parent / "train_config.json").write_text("{"), r"train_config\.json is missing or not valid"),
        (lambda p: (p.parent / "train_config.json").write_bytes(b"\xff\xfe"), r"train_config\.json is missing or not"),
        (lambda p: (p.parent / "train_config.json").unlink(), r"train_config\.json is missing"),
    ],
    ids=[
        "no-optimizer",
        "a-list",
        "foreign-pickle",
        "truncated",
        "empty",
        "missing",
        "bad-json",
        "not-utf8",
        "no-config",
    ],
)
@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")
def test_a_bad_training_state_is_refused_safely(run, write, pattern):
    write(latest(run) / "train_state.pt")
    with pytest.raises(ValueError, match=pattern) as info:
        load_train_state(latest(run))
    assert "weights_only=False" not in str(info.value)  # never suggest unsafe loading
    with pytest.raises(ValueError, match=r"--resume: the latest checkpoint cannot be loaded .*step_0000004 is intact"):
        train(tiny(), run, resume=True, progress=False)


@pytest.mark.parametrize(
    "name,data,pattern",
    [
        ("model.safetensors", b"\x00" * 10, r"model\.safetensors is corrupt"),
        ("config.json", b"\xff\xfe\x00", r"config\.json is not a valid config"),
        ("config.json", b"[1, 2]", r"ModelConfig: got list; expected a JSON object"),
        ("config.json", b'{"version": %d, "d_model": 16}' % MODEL_VERSION, r"ModelConfig: missing fields"),
        ("config.json", b'{"d_model": 16}', r"config\.json: ModelConfig version 1, written by an earlier version"),
    ],
)
def test_a_corrupt_latest_checkpoint_names_the_intact_previous_one(run, name, data, pattern):
    (latest(run) / name).write_bytes(data)
    with pytest.raises(ValueError, match=pattern):
        TransformerLM.from_pretrained(latest(run))
    message = r"latest checkpoint cannot be loaded .*step_0000004 is intact: move .*step_0000008 out of"
    with pytest.raises(ValueError, match=message):
        train(tiny(), run, resume=True, progress=False)
    shutil.move(latest(run), run / "broken")  # what the message says to do
    train(tiny(), run, resume=True, progress=False)
    assert latest(run).name == "step_0000008"


def overwrite_with_nan(checkpoint) -> None:
    """Set the checkpoint's first weight tensor to NaN: the weights of a diverged run, as 0.x kept them."""
    path = checkpoint / "model.safetensors"
    state = load_file(path)
    name = next(iter(state))
    save_file({**state, name: torch.full_like(state[name], float("nan"))}, str(path))


NONFINITE = r"model\.safetensors holds non-finite weights \(NaN or inf\) in .*; expected finite weights"


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--checkpoint", "{run}", "--sequences", "8"],
        ["lm", "sample", "--checkpoint", "{run}", "--prompt", "a"],
        ["convert", "{run}", "--to", "hf", "--out", "{tmp}/hf"],
        ["train", "--out", "{run}", "--resume", *TINY_TRAIN],
    ],
    ids=["eval", "lm-sample", "convert", "resume"],
)
def test_nonfinite_weights_are_refused_by_every_command_that_reads_a_model(tmp_path, capsys, argv):
    tra(["train", "--out", tmp_path / "run", *TINY_TRAIN], capsys)
    overwrite_with_nan(resolve_checkpoint(tmp_path / "run"))
    code, out, err = tra([a.format(run=tmp_path / "run", tmp=tmp_path) for a in argv], capsys)
    assert code == 2 and re.search(NONFINITE, err) and not out, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_lm_eval_refuses_nonfinite_weights(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    flags = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--length", "16", "--batch-size", "2"]
    argv = ["train", "--task", "lm", "--out", tmp_path / "lm", "--steps", "2", *flags, "--no-progress"]
    code, _, err = tra(argv, capsys)
    assert code == 0, err
    overwrite_with_nan(resolve_checkpoint(tmp_path / "lm"))
    code, _, err = tra(["lm", "eval", "--checkpoint", tmp_path / "lm", "--tokens", "600"], capsys)
    assert code == 2 and re.search(NONFINITE, err), err


def test_when_no_checkpoint_is_intact_resume_says_so(run):
    for checkpoint in list_checkpoints(run):
        (checkpoint / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"cannot be loaded .*; no earlier one is intact"):
        train(tiny(), run, resume=True, progress=False)


def test_kill_9_leftovers_are_ignored_and_cleaned_on_resume(run, finished_run, capsys):
    """A killed write leaves a hidden .step_* folder: never taken as a checkpoint, removed on resume."""
    leftover = run / "checkpoints" / ".step_0000012.abcd"
    shutil.copytree(latest(run), leftover)
    (leftover / "model.safetensors").write_bytes(b"partial")
    assert latest(run).name == "step_0000008" and resolve_checkpoint(run).name == "step_0000008"
    train(tiny(steps=12), run, resume=True, progress=False)
    assert not leftover.exists() and "left by an interrupted checkpoint write" in capsys.readouterr().out


def test_a_finished_run_is_extended_only_with_an_explicit_larger_steps(run, finished_run, tmp_path, capsys):
    train(tiny(), run, resume=True, progress=False)  # nothing to do: says how to go further
    assert "pass --steps N (N > 8) with --resume" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"differs .* in \['lr', 'steps'\].*change only --steps"):
        train(tiny(steps=12, lr=1e-2), run, resume=True, progress=False)
    train(tiny(steps=12), run, resume=True, progress=False)
    assert "changing the run's length from 8 to 12 steps" in capsys.readouterr().out
    assert latest(run).name == "step_0000012"
    assert weights(run).keys() == weights(finished_run).keys()
    with pytest.raises(ValueError, match=r"differs .* in \['model\.dropout'\]"):
        train(tiny(steps=12, model=ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2)), run, resume=True)


@pytest.mark.parametrize(
    "setup,pattern",
    [
        (lambda p: p.write_text("x"), r"checkpoint .* not found; expected a checkpoint directory"),
        (lambda p: p.mkdir(), r"checkpoint .* not found; expected a checkpoint directory .* or a run directory"),
        (lambda p: (p / "checkpoints").mkdir(parents=True), r"not found; expected a checkpoint directory"),
    ],
    ids=["a-file", "an-empty-folder", "no-step-folders"],
)
def test_resolving_something_that_is_not_a_checkpoint(tmp_path, setup, pattern):
    target = tmp_path / "target"
    setup(target)
    with pytest.raises(ValueError, match=pattern):
        resolve_checkpoint(target)


@pytest.mark.parametrize("kind", sharing_kinds())
def test_a_run_of_a_kind_sharing_parameters_across_layers_checkpoints_them_once_and_resumes_exactly(kind, tmp_path):
    """The checkpoint's model.safetensors holds a shared parameter once, the optimizer state one entry for it; the
    loaded model's layers hold one tensor again, and a resumed run reaches the uninterrupted weights bit for bit."""
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=2, n_heads=2, attention=kind, dropout=0.1)
    config = tiny(model=model)
    train(config, tmp_path / "straight", progress=False)
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "step_0000008")
    checkpoint = latest(tmp_path / "resumed")
    loaded = TransformerLM.from_pretrained(checkpoint)
    aliases = loaded.shared_aliases()
    assert aliases and sorted(load_file(str(checkpoint / "model.safetensors"))) == sorted(loaded.state_dict())
    assert all(loaded.get_parameter(alias) is loaded.get_parameter(name) for alias, name in aliases.items())
    assert len(load_train_state(checkpoint)[1]["optimizer"]["state"]) == len(list(loaded.parameters()))
    train(config, tmp_path / "resumed", resume=True, progress=False)
    for (name, a), b in zip(weights(tmp_path / "straight").items(), weights(tmp_path / "resumed").values()):
        assert torch.equal(a, b), name
