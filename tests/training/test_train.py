"""Training: exact resume (also after Ctrl-C at any point of a step), divergence, accumulation, schedule,
configs, checkpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tra_attn.training.checkpoint as checkpoint_module
from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import list_checkpoints, load_train_state, resolve_checkpoint
from tra_attn.training.config import VERSION
from tra_attn.training.divergence import TrainingDiverged
from tra_attn.training.loop import accumulate_gradients, inputs_and_labels, training_batch
from tra_attn.training.optim import learning_rate
from tra_attn.upgrade.configs import upgrade_train_config
from tra_attn.upgrade.files import upgrade
from tra_attn.utils.dataclass_io import OldVersion
from tra_attn.utils.jsonl import read_jsonl

FIXTURES = Path(__file__).parents[1] / "fixtures"


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


MOMENTS = [(torch.optim.AdamW, "step"), (TransformerLM, "forward"), (checkpoint_module, "save_pretrained")]


@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_ctrl_c_at_random_moments_then_resume_is_bit_identical_for_every_kind(tmp_path, monkeypatch, kind):
    """Up to two interrupts at moments drawn per kind (inside an optimizer step, a training or validation forward, or a
    checkpoint write), each followed by --resume: the final weights and losses are an uninterrupted run's."""
    config = tiny(
        model=dataclasses.replace(tiny().model, attention=kind, attention_options={}), steps=12, checkpoint_every=5
    )
    train(config, tmp_path / "straight", progress=False)
    rng, interrupted = random.Random(zlib.crc32(kind.encode())), 0
    for _ in range(2):
        target, name = rng.choice(MOMENTS)
        sigint_during(monkeypatch, target, name, rng.randint(1, 2 if name == "save_pretrained" else 4))
        try:
            train(config, tmp_path / "run", resume=True, progress=False)
        except KeyboardInterrupt:
            interrupted += 1
        monkeypatch.undo()
    assert interrupted >= 1  # (a second moment may fall after the run's last step)
    train(config, tmp_path / "run", resume=True, progress=False)
    assert_same_weights(tmp_path / "straight", tmp_path / "run")
    assert losses(tmp_path / "straight") == losses(tmp_path / "run")


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
    # Each loss is the mean of n positive fp32 per-token losses, summed in another order (n u relative, u = 2^-24,
    # for recursive summation), and each per-token loss comes from matmuls of another shape (micro-batches of 2
    # against one of 8): dot products of d_model terms, two in sequence from the last layer's input to the logits,
    # each within d_model u relative. So (n + 2 d_model) u: 2.8e-6 here (rel=1e-6 was below it).
    scored = int((labels != -100).sum())
    assert losses_[0] == pytest.approx(losses_[1], rel=(scored + 2 * model_config.d_model) * 2.0**-24)
    for name, whole in grads[0].items():
        assert whole.abs().max() > 0, name
        assert torch.allclose(whole, grads[1][name], rtol=1e-5, atol=1e-7), name


def resume_fixture(run: Path) -> Path:
    """Resume ``run``, a copy of the 0.1.0 fixture converted by ``tra upgrade``; the last checkpoint."""
    saved = json.loads((run / "train_config.json").read_text())
    return train(TrainConfig.from_dict(saved), run, resume=True, progress=False)


# The bound on two AdamW steps taken from the same state on two machines. Another CPU (oneDNN kernels, ISA) sums
# the gradient's fp32 terms in another order: each gradient coordinate, a sum of at most N = 1024 products here
# (batch 4 x 15 positions x d_model 16), moves by a relative N u (u = 2^-24, fp32's unit roundoff). AdamW's step
# lr m/(sqrt(v) + eps) is homogeneous of degree 0 in the gradient, so it moves by at most about twice that
# relative amount of the step itself, whose size is about lr = 3e-3 per coordinate: 2 steps x 2 x lr x N u
# = 7.3e-7, plus half a unit in the last place of a weight below 0.1 (3.7e-9). A resume that lost the optimizer
# state or the RNG moves weights by a good part of a step (1e-4 and more).
ANOTHER_MACHINE_ATOL = 2 * 2 * 3e-3 * 1024 * 2.0**-24 + 2.0**-28


def test_a_checkpoint_written_by_version_0_1_resumes_exactly_here_and_to_fp32_resolution_elsewhere(
    tmp_path, request, monkeypatch
):
    """The fixture is the step-2 checkpoint of a 0.1.0 run (dropout 0.1), written on another machine; 0.1.0 went
    on there to the step-4 weights in v0_1_step4_expected.safetensors.

    On this machine the promise is bit identity: resuming the fixture straight to step 4, or stopping it after
    step 3 (Ctrl-C) and resuming again, give the same weights. Against the other machine's step-4 weights the
    promise is fp32 resolution (``ANOTHER_MACHINE_ATOL``): this CPU's kernels sum in another order, so
    ``torch.equal`` held only where the kernels matched (it failed here, by 3.7e-9 = one unit in the last place).
    The fixture ran with 2 CPU threads, which sets the order of sums too; the runs here use 2 as well."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    request.addfinalizer(lambda: torch.set_num_threads(threads))
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    for run in (straight, stopped):
        shutil.copytree(FIXTURES / "v0_1_run", run)
        saved = json.loads((run / "train_config.json").read_text())
        assert "version" not in saved and "p_ignore" in saved  # a version-1 config
        with pytest.raises(OldVersion, match=r"TrainConfig version 1, written by an earlier version .*`tra upgrade"):
            resume_fixture(run)
        with pytest.raises(OldVersion, match=rf"{run}/checkpoints/step_0000002/train_config\.json: TrainConfig v"):
            load_train_state(run / "checkpoints" / "step_0000002")
        assert len(upgrade(run)) == 3  # the run's train_config.json, its checkpoint's and its config.json
    got = TransformerLM.from_pretrained(resume_fixture(straight)).state_dict()
    sigint_during(monkeypatch, torch.optim.AdamW, "step", 1)  # in step 3: it finishes, is saved, and stops
    with pytest.raises(KeyboardInterrupt):
        resume_fixture(stopped)
    monkeypatch.undo()
    assert [p.name for p in list_checkpoints(stopped)] == ["step_0000002", "step_0000003"]
    again = TransformerLM.from_pretrained(resume_fixture(stopped)).state_dict()
    assert all(torch.equal(got[name], again[name]) for name in got)
    expected = load_file(FIXTURES / "v0_1_step4_expected.safetensors")
    start = load_file(FIXTURES / "v0_1_run" / "checkpoints" / "step_0000002" / "model.safetensors")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=ANOTHER_MACHINE_ATOL, msg=name)
        assert (expected[name] - start[name]).abs().max() > 100 * ANOTHER_MACHINE_ATOL  # the steps moved it
    assert json.loads((straight / "train_config.json").read_text())["version"] == VERSION


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
    assert data["version"] == VERSION and TrainConfig.from_dict(data) == config
    with pytest.raises(ValueError, match=r"unknown fields \['epochs'\]"):
        TrainConfig.from_dict({**data, "epochs": 3})
    without_lr = {k: v for k, v in data.items() if k != "lr"}
    with pytest.raises(ValueError, match=r"missing fields \['lr'\]"):
        TrainConfig.from_dict(without_lr)
    assert TrainConfig.from_dict(without_lr, partial=True).lr == 1e-3
    with pytest.raises(ValueError, match=rf"version = {VERSION + 1}; expected {VERSION} \(newer files need a newer"):
        TrainConfig.from_dict({**data, "version": VERSION + 1})
    with pytest.raises(OldVersion, match=rf"TrainConfig version 5, written by an earlier version of tra; expected "
                       rf"version {VERSION}: convert it with `tra upgrade PATH`"):  # fmt: skip
        TrainConfig.from_dict({**data, "version": 5})


def test_version_1_configs_upgrade():
    v1 = json.loads((FIXTURES / "v0_1_run" / "train_config.json").read_text())
    current = upgrade_train_config(v1)
    assert current["task_args"] == {"p_ignore": 0.8, "final_read": True} and current["version"] == VERSION
    assert current["grad_accum"] == 1 and current["compile"] is False and "p_ignore" not in current
    assert upgrade_train_config(current) == current  # a current dict is left as it is
    assert TrainConfig.from_dict(current).task_args == current["task_args"]


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


TWO_CTRL_C = """
import atexit, os, signal, sys
import torch
import tra_attn.cli as cli

moment = sys.argv.pop(1)
steps = {"n": 0}
step = torch.optim.AdamW.step


def first_in_step_2(self, *args, **kwargs):
    steps["n"] += 1
    if steps["n"] == 2:
        os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C, inside step 2
    return step(self, *args, **kwargs)


torch.optim.AdamW.step = first_in_step_2
if moment == "while-reporting":  # the second arrives while main reports the first (the checkpoint is written)
    say = cli._say
    cli._say = lambda line: (os.kill(os.getpid(), signal.SIGINT), say(line))
else:  # the second arrives while the interpreter exits
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
sys.exit(cli.main())
"""


@pytest.mark.parametrize("moment", ["while-reporting", "at-exit"])
def test_two_ctrl_c_within_milliseconds_exit_130_after_saving(tmp_path, moment):
    """The second Ctrl-C of two pressed together arrived after the step was saved: the process died of SIGINT (with
    a traceback) instead of exiting 130. `tra` in a new process, the second signal delivered at each late moment."""
    script = tmp_path / "two_ctrl_c.py"
    script.write_text(TWO_CTRL_C)
    argv = [sys.executable, str(script), moment, "train", "--out", str(tmp_path / "run"), "--steps", "6"]
    argv += ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 130 and "Traceback" not in result.stderr, (result.returncode, result.stderr[-2000:])
    assert "tra: interrupted after step 2: saved a checkpoint; continue with --resume" in result.stderr
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step_0000002"]


def test_a_resume_on_another_cpu_thread_count_says_it_is_not_bit_identical(tmp_path, capsys):
    """Sums split over threads round differently: every kind's last bits depend on the thread count."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        train(tiny(steps=4), tmp_path, progress=False)
        torch.set_num_threads(2)
        capsys.readouterr()
        train(tiny(steps=6), tmp_path, resume=True, progress=False)
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    assert "was trained on 1 CPU threads, this process has 2" in out and "OMP_NUM_THREADS=1 for a bit-identical" in out
