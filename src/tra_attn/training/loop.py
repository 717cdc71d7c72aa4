"""The task-agnostic training loop: AdamW, cosine schedule, clipping, gradient accumulation, autocast,
optional torch.compile, JSONL metrics, periodic validation, checkpoints and exact resume.

Batches are a pure function of (seed, step), the model computes its own per-token loss, and the
optimizer and RNG states are checkpointed between whole steps only (Ctrl-C waits for the step to
finish), so ``--resume`` continues exactly: N/2 steps + resume + N/2 steps gives bit-identical weights
to N steps straight.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data import Task, TaskBatch
from ..models import IGNORE_INDEX, TransformerLM
from ..utils.atomic import atomic_write_text, make_directory
from ..utils.jsonl import append_jsonl, read_jsonl, write_jsonl
from .checkpoint import (
    TRAIN_CONFIG_NAME,
    latest_checkpoint,
    list_checkpoints,
    load_train_state,
    remove_interrupted_writes,
    save_checkpoint,
)
from .config import TrainConfig, check_device
from .interrupt import deferred_interrupts
from .optim import build_optimizer, learning_rate

VALIDATION_SEED = 1_000_000_007  # validation sequences never coincide with a training batch seed
METRICS_NAME = "metrics.jsonl"

ValidationFn = Callable[[TransformerLM, torch.Tensor, torch.Tensor], dict]


def batch_seed(seed: int, step: int) -> int:
    return seed * 1_000_003 + step


def training_batch(task: Task, config: TrainConfig, step: int) -> TaskBatch:
    """The global batch of ``step``: the same for any accumulation (or, later, any number of processes)."""
    return task.sample(config.batch_size, config.length, batch_seed(config.seed, step))


def inputs_and_labels(batch: TaskBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token inputs (N, L-1) and labels (N, L-1), IGNORE_INDEX where a token is not scored."""
    tokens = batch.tokens
    return tokens[:, :-1], tokens[:, 1:].masked_fill(~batch.loss_mask[:, 1:], IGNORE_INDEX)


def autocast(config: TrainConfig):
    """bf16 autocast of the forward pass, or a no-op for fp32."""
    device_type = torch.device(config.device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.precision == "bf16")


def accumulate_gradients(model, config: TrainConfig, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Backward of the mean loss over every scored token of the batch, in ``grad_accum`` micro-batches.

    Each micro-batch's summed loss is divided by the scored tokens of the whole batch, so the gradient
    equals that of one pass over the whole batch (exactly so without dropout). Returns the mean loss.
    """
    scored = int((labels != IGNORE_INDEX).sum())
    total = torch.zeros((), device=config.device)
    size = config.micro_batch_size
    for start in range(0, config.batch_size, size):
        x = inputs[start : start + size].to(config.device)
        y = labels[start : start + size].to(config.device)
        with autocast(config):
            per_token = model(x, labels=y)
        loss = per_token.sum() / max(scored, 1)
        loss.backward()
        total += loss.detach()
    return total


@torch.no_grad()
def validate(model: TransformerLM, config: TrainConfig, batch: TaskBatch, metrics_fn: ValidationFn) -> dict:
    was_training = model.training
    model.eval()
    metrics = metrics_fn(model, batch.tokens.to(config.device), batch.loss_mask.to(config.device))
    model.train(was_training)
    return metrics


def config_differences(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ between two config dicts."""
    names = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key != "task_args":
            names += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            names.append(f"{prefix}{key}")
    return names


def _check_resumable(checkpoint: Path, saved: dict, config: TrainConfig, step: int) -> None:
    """Same config, or the same one with more ``steps`` (extending a run, stated explicitly)."""
    differences = config_differences(TrainConfig.from_dict(saved).to_dict(), config.to_dict())
    if differences == ["steps"] and config.steps > step:
        print(
            f"--resume: changing the run's length from {saved['steps']} to {config.steps} steps (the learning-rate "
            f"schedule continues as if the run had been planned for {config.steps})"
        )
        return
    if differences:
        hint = f"; to train past step {step}, change only --steps" if "steps" in differences else ""
        raise ValueError(
            f"--resume: the config differs from the one saved in {checkpoint} in {differences}; "
            f"resume with the same settings or use a new output directory{hint}"
        )


def _load_latest(run_dir: Path, checkpoint: Path, device: str):
    """(train config dict, train state, model) of the latest checkpoint; if it cannot be loaded, the
    error names the newest earlier checkpoint that can, and how to resume from it."""

    def load(path: Path):
        saved, state = load_train_state(path)
        return saved, state, TransformerLM.from_pretrained(path, device=device)

    try:
        return load(checkpoint)
    except ValueError as err:
        for previous in reversed(list_checkpoints(run_dir)[:-1]):
            try:
                load(previous)
            except ValueError:
                continue
            raise ValueError(
                f"--resume: the latest checkpoint cannot be loaded ({err}); {previous} is intact: move "
                f"{checkpoint} out of {checkpoint.parent} and run again with --resume to continue from it"
            ) from None
        raise ValueError(
            f"--resume: the latest checkpoint cannot be loaded ({err}); no earlier one is intact"
        ) from None


def _restore(run_dir: Path, config: TrainConfig, resume: bool):
    """(model, optimizer, step, train seconds so far): fresh, or from the run's latest checkpoint."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None and not resume:
        raise ValueError(f"{run_dir} already holds checkpoints; pass --resume to continue or use a new directory")
    for path in remove_interrupted_writes(run_dir):
        print(f"removed {path}: left by an interrupted checkpoint write")
    torch.manual_seed(config.seed)
    if checkpoint is None:
        if resume:
            print(f"--resume: no checkpoint in {run_dir}; starting from step 0")
        model = TransformerLM(config.model).to(config.device)
        return model, build_optimizer(model, config), 0, 0.0
    saved_config, state, model = _load_latest(run_dir, checkpoint, config.device)
    _check_resumable(checkpoint, saved_config, config, state["step"])
    if state["step"] >= config.steps:
        print(
            f"--resume: the run already finished {state['step']} steps; pass --steps N (N > {state['step']}) "
            "with --resume to train further"
        )
    optimizer = build_optimizer(model, config)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return model, optimizer, state["step"], state.get("train_seconds", 0.0)


def train(
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    metrics_fn: ValidationFn | None = None,
) -> Path:
    """Train (or continue training) a model in ``run_dir``; returns the final checkpoint directory.

    Writes ``run_dir/train_config.json``, ``run_dir/metrics.jsonl`` (training rows every ``log_every``
    steps, ``val_*`` rows on the task's held-out sequences every ``eval_every`` steps, from ``metrics_fn``
    or else the task's own metrics) and
    ``run_dir/checkpoints/``. Ctrl-C finishes the current step, saves a checkpoint and raises
    KeyboardInterrupt.
    """
    check_device(config.device)
    run_dir = make_directory(run_dir, "run directory")
    metrics_path = run_dir / METRICS_NAME
    model, optimizer, start, seconds_before = _restore(run_dir, config, resume)
    # Log rows written after the checkpoint will be produced again.
    kept = [row for row in read_jsonl(metrics_path) if row["step"] <= start] if start else []
    write_jsonl(metrics_path, kept)
    atomic_write_text(run_dir / TRAIN_CONFIG_NAME, json.dumps(config.to_dict(), indent=2, sort_keys=True))
    task = config.task_instance()
    validation = task.validation(config.eval_sequences, config.length, VALIDATION_SEED + config.seed)
    metrics_fn = metrics_fn or task.metrics
    step_model = torch.compile(model) if config.compile else model
    t0 = time.perf_counter()

    def seconds() -> float:
        return seconds_before + time.perf_counter() - t0

    def save(step: int) -> Path:
        state = {
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "step": step,
            "train_seconds": seconds(),
        }
        if torch.device(config.device).type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return save_checkpoint(run_dir, step, model, config.to_dict(), state)

    model.train()
    step = last_saved = start
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not progress,
        desc=f"{config.model.attention} {run_dir.name}",
        leave=False,
    )
    clip = config.grad_clip if config.grad_clip > 0 else math.inf
    try:
        with deferred_interrupts() as interrupt:
            while step < config.steps:
                lr = learning_rate(config, step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                inputs, labels = inputs_and_labels(training_batch(task, config, step))
                optimizer.zero_grad(set_to_none=True)
                loss = accumulate_gradients(step_model, config, inputs, labels)
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                step += 1
                bar.update(1)
                if step % config.log_every == 0 or step == config.steps:
                    row = {"step": step, "loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item()}
                    append_jsonl(metrics_path, {**row, "elapsed_s": seconds()})
                    bar.set_postfix(loss=f"{row['loss']:.4f}")
                if config.eval_every and (step % config.eval_every == 0 or step == config.steps):
                    val = validate(model, config, validation, metrics_fn)
                    append_jsonl(metrics_path, {"step": step, **{f"val_{k}": v for k, v in val.items()}})
                if step % config.checkpoint_every == 0 or step == config.steps:
                    save(step)
                    last_saved = step
                if interrupt.requested:
                    if step != last_saved:
                        save(step)
                    print(f"\ninterrupted after step {step}: saved a checkpoint; continue with --resume")
                    raise KeyboardInterrupt
    finally:
        bar.close()
    return latest_checkpoint(run_dir)
