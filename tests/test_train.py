"""Training: exact resume (also after Ctrl-C at any point of a step), divergence, accumulation, schedule,
configs, checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tra_attn import ModelConfig, TransformerLM
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import list_checkpoints, load_train_state, resolve_checkpoint
from tra_attn.training.config import migrate
from tra_attn.training.divergence import TrainingDiverged
from tra_attn.training.loop import accumulate_gradients, inputs_and_labels, training_batch
from tra_attn.training.optim import learning_rate
from tra_attn.utils.jsonl import read_jsonl

FIXTURES = Path(__file__).parent / "fixtures"


def tiny(**overrides) -> TrainConfig:
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, attention="tra", dropout=0.1)
    base = dict(
        task="flipflop",
        task_args={"p_ignore": 0.8, "final_read": True},
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


def assert_same_weights(a, b):
    for (name, x), y in zip(weights(a).items(), weights(b).values()):
        assert torch.equal(x, y), name


def losses(run_dir):
    return [(r["step"], r["loss"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]


def test_resume_is_bit_identical(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(tiny(), straight, progress=False)
    train(tiny(), resumed, progress=False)
    shutil.rmtree(resumed / "checkpoints" / "step_0000008")  # back to the step-4 checkpoint
    train(tiny(), resumed, resume=True, progress=False)
    assert_same_weights(straight, resumed)
    assert losses(straight) == losses(resumed)


def sigint_during(monkeypatch, target, name, at_call):
    """Deliver a real SIGINT from inside ``target.name`` on its ``at_call``-th call (1-based)."""
    original = getattr(target, name)
    calls = {"n": 0}

    def wrapped(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at_call:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(target, name, wrapped)


@pytest.mark.parametrize(
    "where",
    [
        (torch.optim.AdamW, "step", 6),  # inside the optimizer step of step 6
        (TransformerLM, "forward", 7),  # inside the forward of step 6 (dropout has consumed RNG)
    ],
    ids=["optimizer-step", "forward-with-dropout"],
)
def test_ctrl_c_anywhere_in_a_step_checkpoints_a_whole_step_and_resumes_exactly(tmp_path, monkeypatch, where):
    train(tiny(), tmp_path / "straight", progress=False)
    target, name, at_call = where
    # Forward calls: one per step, plus validation at step 4 (eval_every=4): step 6's forward is call 7.
    sigint_during(monkeypatch, target, name, at_call)
    with pytest.raises(KeyboardInterrupt):
        train(tiny(), tmp_path / "run", progress=False)
    monkeypatch.undo()
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step_0000004", "step_0000006"]
    _, state = load_train_state(list_checkpoints(tmp_path / "run")[-1])
    assert state["step"] == 6 and {float(s["step"]) for s in state["optimizer"]["state"].values()} == {6.0}
    train(tiny(), tmp_path / "run", resume=True, progress=False)
    assert_same_weights(tmp_path / "straight", tmp_path / "run")


def test_second_ctrl_c_stops_at_once_without_saving_a_partial_step(tmp_path, monkeypatch):
    original = torch.optim.AdamW.step

    def two_interrupts(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here, before the update
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", two_interrupts)
    with pytest.raises(KeyboardInterrupt):
        train(tiny(), tmp_path, progress=False)
    assert list_checkpoints(tmp_path) == []


def finite_weights(checkpoint) -> bool:
    return all(torch.isfinite(t).all() for t in load_file(checkpoint / "model.safetensors").values())


def test_a_diverging_run_names_its_first_nonfinite_step_and_writes_no_checkpoint_of_it(tmp_path):
    """The loss goes non-finite at step 2; the watch is read at the step-4 log row and checkpoint, and
    names step 2. The signal handlers in place before training are back after it."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(
        TrainingDiverged, match=r"training diverged at step 2: the loss or gradient norm is not finite"
    ) as info:
        train(tiny(lr=1e9, log_every=4, eval_every=0), tmp_path, progress=False)
    assert info.value.step == 2 and info.value.checkpoint is None and "no checkpoint was written" in str(info.value)
    assert list_checkpoints(tmp_path) == [] and read_jsonl(tmp_path / "metrics.jsonl") == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_nonfinite_weight_is_never_checkpointed(tmp_path, monkeypatch):
    """An update that overflows a weight while the step's loss and gradient norm were finite is caught
    when the checkpoint is about to be written; the message names the last finite checkpoint."""
    original = torch.optim.AdamW.step
    calls = {"n": 0}

    def overflow_at_step_8(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 8:
            self.param_groups[0]["params"][0].data.fill_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.AdamW, "step", overflow_at_step_8)
    with pytest.raises(TrainingDiverged, match=r"at step 8: a weight is not finite .* checkpoint is .*step_0000004"):
        train(tiny(), tmp_path, progress=False)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_0000004"]
    assert finite_weights(list_checkpoints(tmp_path)[0])


def test_gradient_accumulation_gives_the_gradient_of_the_whole_batch():
    """Without dropout, 4 micro-batches of 2 give the gradient (and loss) of one batch of 8, to fp32 rounding.

    Gradients are compared rather than weights after AdamW, whose first steps move every parameter by
    about lr * sign(gradient) and so turn a rounding-level change of a near-zero gradient into lr."""
    model_config = ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, attention="tra")
    grads, losses_ = [], []
    for accum in (1, 4):
        config = tiny(model=model_config, batch_size=8, grad_accum=accum)
        torch.manual_seed(0)
        model = TransformerLM(model_config)
        inputs, labels = inputs_and_labels(training_batch(config.task_instance(), config, step=3))
        losses_.append(accumulate_gradients(model, config, inputs, labels).item())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    assert losses_[0] == pytest.approx(losses_[1], rel=1e-6)
    for name, whole in grads[0].items():
        assert whole.abs().max() > 0, name
        assert torch.allclose(whole, grads[1][name], rtol=1e-5, atol=1e-7), name


def test_a_checkpoint_written_by_version_0_1_resumes_bit_identically(tmp_path, request):
    """The fixture is the step-2 checkpoint of a 0.1.0 run (dropout 0.1); 0.1.0 itself went on to the
    step-4 weights in v0_1_step4_expected.safetensors. It ran with 2 CPU threads, and the thread count
    sets the order of fp32 sums: the resumed run uses 2 threads too, whatever this machine's default."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "v0_1_run", run)
    saved = json.loads((run / "train_config.json").read_text())
    assert "version" not in saved and "p_ignore" in saved  # a version-1 config
    checkpoint = train(TrainConfig.from_dict(saved), run, resume=True, progress=False)
    expected = load_file(FIXTURES / "v0_1_step4_expected.safetensors")
    got = TransformerLM.from_pretrained(checkpoint).state_dict()
    assert all(torch.equal(expected[name], got[name]) for name in expected)
    assert json.loads((run / "train_config.json").read_text())["version"] == 6


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
        ({"lr": True}, r"TrainConfig\.lr = True"),
        ({"min_lr_ratio": 2.0}, r"TrainConfig\.min_lr_ratio = 2\.0; expected a number in \[0, 1\]"),
        ({"length": 15}, r"length = 15; expected a positive even number"),
        ({"task_args": {"p_ignore": 1.0}}, r"p_ignore = 1\.0; expected a probability"),
        ({"task_args": {"rate": 1.0}}, r"task 'flipflop': unknown arguments \['rate'\]"),
        ({"task_args": [0.8]}, r"task_args = \[0\.8\]; expected a dict"),
        ({"task": "copy"}, r"task = 'copy'"),
        ({"grad_accum": 3}, r"grad_accum = 3; expected a divisor of batch_size = 4"),
        ({"grad_accum": 0}, r"grad_accum = 0; expected a positive integer"),
        ({"compile": "yes"}, r"compile = 'yes'; expected true or false"),
        ({"model": ModelConfig(vocab_size=4)}, r"vocab_size = 4; expected at least the flipflop vocabulary size 6"),
    ],
)
def test_bad_train_config(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        tiny(**overrides)


def test_train_config_round_trips_through_json_and_is_strict():
    config = tiny()
    data = json.loads(json.dumps(config.to_dict()))
    assert data["version"] == 6 and TrainConfig.from_dict(data) == config
    with pytest.raises(ValueError, match=r"unknown fields \['epochs'\]"):
        TrainConfig.from_dict({**data, "epochs": 3})
    without_lr = {k: v for k, v in data.items() if k != "lr"}
    with pytest.raises(ValueError, match=r"missing fields \['lr'\]"):
        TrainConfig.from_dict(without_lr)
    assert TrainConfig.from_dict(without_lr, partial=True).lr == 1e-3
    with pytest.raises(ValueError, match=r"version = 7; expected a version from 1 to 6"):
        TrainConfig.from_dict({**data, "version": 7})


def test_version_1_configs_migrate():
    v1 = json.loads((FIXTURES / "v0_1_run" / "train_config.json").read_text())
    v2 = migrate(v1)
    assert v2["task_args"] == {"p_ignore": 0.8, "final_read": True}
    assert v2["grad_accum"] == 1 and v2["compile"] is False and "p_ignore" not in v2
    assert TrainConfig.from_dict(v1).to_dict()["task_args"] == v2["task_args"]


def test_bad_devices_are_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"device = 'bogus'; expected 'cpu', 'cuda' or 'cuda:N'"):
        train(tiny(device="bogus"), tmp_path / "a", progress=False)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device = 'cuda', but this machine has no CUDA device"):
            train(tiny(device="cuda"), tmp_path / "b", progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_bf16_autocast_training_runs(tmp_path):
    train(tiny(steps=4, precision="bf16"), tmp_path, progress=False)
    assert all(torch.isfinite(torch.tensor(loss)) for _, loss in losses(tmp_path))
    with pytest.raises(ValueError, match=r"precision = 'fp16'; expected 'fp32' or 'bf16'"):
        tiny(precision="fp16")


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path):
    """--compile trains through torch.compile: the same losses as eager, to compiler rounding."""
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, attention="tra")
    train(tiny(model=model, steps=3, eval_every=0), tmp_path / "eager", progress=False)
    train(tiny(model=model, steps=3, eval_every=0, compile=True), tmp_path / "compiled", progress=False)
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert [s for s, _ in eager] == [s for s, _ in compiled] == [1, 2, 3]
    assert [loss for _, loss in compiled] == pytest.approx([loss for _, loss in eager], rel=1e-4)
