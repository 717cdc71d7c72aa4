"""Training: exact resume (also after Ctrl-C), schedule, config checks, checkpoints."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.checkpoint import list_checkpoints, load_train_state, resolve_checkpoint
from tra_attn.tasks.flipflop import FlipFlop
from tra_attn.train import TrainConfig, learning_rate, train
from tra_attn.utils.jsonl import read_jsonl


def tiny(**overrides) -> TrainConfig:
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, attention="tra", dropout=0.1)
    base = dict(
        model=model,
        length=16,
        steps=8,
        batch_size=4,
        lr=3e-3,
        warmup_steps=2,
        log_every=1,
        eval_every=4,
        eval_sequences=8,
        checkpoint_every=4,
    )
    return TrainConfig(**{**base, **overrides})


def weights(run_dir):
    return TransformerLM.from_pretrained(resolve_checkpoint(run_dir)).state_dict()


def losses(run_dir):
    return [(r["step"], r["loss"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]


def test_resume_is_bit_identical(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny(), straight, progress=False)
    train(tiny(), resumed, progress=False)
    shutil.rmtree(resumed / "checkpoints" / "step_0000008")  # back to the step-4 checkpoint
    train(tiny(), resumed, resume=True, progress=False)
    for (name, a), b in zip(weights(straight).items(), weights(resumed).values()):
        assert torch.equal(a, b), name
    assert losses(straight) == losses(resumed)


def test_ctrl_c_saves_a_checkpoint_and_resume_finishes_identically(tmp_path, monkeypatch):
    train(tiny(), tmp_path / "straight", progress=False)
    calls = {"n": 0}
    original = FlipFlop.sample

    def interrupt_at_step_6(self, num, length, seed):
        if num == 4:  # training batches only
            calls["n"] += 1
            if calls["n"] == 7:
                raise KeyboardInterrupt
        return original(self, num, length, seed)

    monkeypatch.setattr(FlipFlop, "sample", interrupt_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        train(tiny(), tmp_path / "run", progress=False)
    monkeypatch.setattr(FlipFlop, "sample", original)
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step_0000004", "step_0000006"]
    train(tiny(), tmp_path / "run", resume=True, progress=False)
    for (name, a), b in zip(weights(tmp_path / "straight").items(), weights(tmp_path / "run").values()):
        assert torch.equal(a, b), name


def test_resume_with_a_different_config_is_refused(tmp_path):
    train(tiny(steps=4), tmp_path, progress=False)
    with pytest.raises(ValueError, match="the config differs"):
        train(tiny(steps=4, lr=1e-3), tmp_path, resume=True, progress=False)


def test_checkpoint_contents_and_pruning(tmp_path):
    train(tiny(steps=12), tmp_path, progress=False)
    ckpts = list_checkpoints(tmp_path)
    assert [p.name for p in ckpts] == ["step_0000008", "step_0000012"]  # the two newest are kept
    config, state = load_train_state(ckpts[-1])
    assert config == tiny(steps=12).to_dict() and state["step"] == 12 and state["train_seconds"] > 0
    assert json.loads((tmp_path / "train_config.json").read_text()) == config
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_learning_rate_schedule():
    config = tiny(steps=10, warmup_steps=2, lr=1.0, min_lr_ratio=0.1)
    lrs = [learning_rate(config, s) for s in range(10)]
    assert lrs[0] == 0.5 and lrs[1] == 1.0  # linear warm-up
    assert lrs[2] == 1.0 and all(a > b for a, b in zip(lrs[2:], lrs[3:]))  # cosine decay
    assert abs(learning_rate(config, 10) - 0.1) < 1e-12


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"steps": 0}, r"TrainConfig\.steps = 0; expected a positive integer"),
        ({"lr": -1.0}, r"TrainConfig\.lr = -1\.0"),
        ({"min_lr_ratio": 2.0}, r"TrainConfig\.min_lr_ratio = 2\.0; expected a number in \[0, 1\]"),
        ({"length": 15}, r"length = 15; expected an even number"),
        ({"p_ignore": 1.0}, r"p_ignore = 1\.0; expected a probability"),
        ({"task": "copy"}, r"task = 'copy'"),
        ({"model": ModelConfig(vocab_size=4)}, r"vocab_size = 4; expected at least the flipflop vocabulary size 6"),
    ],
)
def test_bad_train_config(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        tiny(**overrides)


def test_train_config_round_trips_through_json():
    config = tiny()
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match=r"unknown fields \['epochs'\]"):
        TrainConfig.from_dict({**config.to_dict(), "epochs": 3})


def test_bf16_autocast_training_runs(tmp_path):
    train(tiny(steps=4, precision="bf16"), tmp_path, progress=False)
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in losses(tmp_path))
    with pytest.raises(ValueError, match=r"precision = 'fp16'; expected 'fp32' or 'bf16'"):
        tiny(precision="fp16")
