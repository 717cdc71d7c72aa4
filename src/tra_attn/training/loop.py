"""The task-agnostic training loop: AdamW, cosine schedule, clipping, gradient accumulation, autocast,
optional torch.compile, data parallelism under torchrun, JSONL metrics, periodic validation,
checkpoints and exact resume.

Batches are a pure function of (seed, step), the model computes its own per-token loss, and the
optimizer and RNG states are checkpointed between whole steps only (Ctrl-C waits for the step to
finish), so ``--resume`` continues exactly: N/2 steps + resume + N/2 steps gives bit-identical weights
to N steps straight.

With ``fit_accuracy`` the run trains to fit: it stops at the first validation whose full-sequence
accuracy reaches that value (``steps`` is then the cap), saves a checkpoint there, and records the step
as ``fit_step`` in the checkpoint's state and in metrics.jsonl.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
    new_checkpoint_folder,
    remove_interrupted_writes,
    save_checkpoint,
)
from .config import TrainConfig, check_device
from .distributed import Processes, join, leave
from .interrupt import deferred_interrupts
from .optim import build_optimizer, learning_rate
from .sharding import SHARDED, full_weights, load_optimizer, save_optimizer, shard

ONE_PROCESS = Processes()
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


def accumulate_gradients(
    model, config: TrainConfig, inputs: torch.Tensor, labels: torch.Tensor, processes: Processes = ONE_PROCESS
) -> torch.Tensor:
    """Backward of the mean loss over every scored token of the global batch, from this rank's rows in
    ``grad_accum`` micro-batches.

    Each micro-batch's summed loss is divided by the scored tokens of the whole global batch (and
    multiplied by the number of ranks, whose gradients DistributedDataParallel averages), so the gradient
    equals that of one pass over the whole batch (exactly so without dropout, up to the order of fp32
    sums). Returns this rank's share of the mean loss (the shares of all ranks sum to it).
    """
    scored = int((labels != IGNORE_INDEX).sum())
    rows = processes.rows(config.batch_size)
    inputs, labels = inputs[rows], labels[rows]
    total = torch.zeros((), device=config.device)
    size = config.batch_size // (config.grad_accum * processes.world_size)
    starts = range(0, len(inputs), size)
    for start in starts:
        x = inputs[start : start + size].to(config.device)
        y = labels[start : start + size].to(config.device)
        last = start == starts[-1]
        # Gradients are all-reduced (DDP) or reduce-scattered (FSDP) only after the last micro-batch.
        if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
            model.set_requires_gradient_sync(last)
        sync = model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()
        with sync:
            with autocast(config):
                per_token = model(x, labels=y)
            loss = per_token.sum() / max(scored, 1)
            (loss * processes.world_size).backward()
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


def _restore(run_dir: Path, config: TrainConfig, resume: bool, device: str, processes: Processes, fsdp: bool):
    """(model on ``device``, sharded if ``fsdp``; optimizer; step; train seconds so far; the step at which
    the run fitted, or None): fresh, or from the run's latest checkpoint."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None and not resume:
        raise ValueError(f"{run_dir} already holds checkpoints; pass --resume to continue or use a new directory")
    if processes.is_main:
        for path in remove_interrupted_writes(run_dir):
            print(f"removed {path}: left by an interrupted checkpoint write")
    processes.barrier()
    torch.manual_seed(config.seed)
    if checkpoint is None:
        if resume and processes.is_main:
            print(f"--resume: no checkpoint in {run_dir}; starting from step 0")
        model = TransformerLM(config.model).to(device)
        if fsdp:
            shard(model)
        return model, build_optimizer(model, config), 0, 0.0, None
    saved_config, state, model = _load_latest(run_dir, checkpoint, device)
    _check_resumable(checkpoint, saved_config, config, state["step"])
    if model.config != config.model:  # a version-4 run: its threshold warm-up is in train_config.json only
        model = TransformerLM.from_pretrained(checkpoint, device=device, config=config.model)
    fit_step = state.get("fit_step")
    if fit_step is not None and processes.is_main:
        print(f"--resume: the run fitted at step {fit_step} (fit_accuracy = {config.fit_accuracy}); nothing to train")
    elif state["step"] >= config.steps and processes.is_main:
        print(
            f"--resume: the run already finished {state['step']} steps; pass --steps N (N > {state['step']}) "
            "with --resume to train further"
        )
    sharded = isinstance(state["optimizer"], str) and state["optimizer"] == SHARDED
    if fsdp and not sharded:
        raise ValueError(
            f"--fsdp: {checkpoint} was written without --fsdp (its optimizer state is not sharded); resume it "
            "without --fsdp, on any number of processes"
        )
    if fsdp:
        shard(model)
    optimizer = build_optimizer(model, config)
    if sharded:
        load_optimizer(model, optimizer, checkpoint)
    else:
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state and not processes.distributed:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return model, optimizer, state["step"], state.get("train_seconds", 0.0), fit_step


def _seed_step(config: TrainConfig, step: int, processes: Processes) -> None:
    """With several ranks, dropout draws from a generator seeded by (seed, step, rank): checkpoints then need
    no per-rank RNG state, and a resumed run draws what an uninterrupted one would. One process keeps the
    checkpointed stream (as in 0.1 and 0.2)."""
    if processes.distributed:
        torch.manual_seed((batch_seed(config.seed, step) * 65_537 + processes.rank) % (1 << 63))


def _check_world_size(config: TrainConfig, processes: Processes) -> None:
    parts = config.grad_accum * processes.world_size
    if config.batch_size % parts:
        raise ValueError(
            f"batch_size = {config.batch_size}; expected a multiple of grad_accum x processes = "
            f"{config.grad_accum} x {processes.world_size} = {parts} (every rank trains on equal micro-batches)"
        )


def _fitted(val: dict, fit_accuracy: float) -> bool:
    """Whether a validation reached ``fit_accuracy`` full-sequence accuracy (a ValueError if it has none)."""
    if "full_seq_acc" not in val:
        raise ValueError(
            f"TrainConfig.fit_accuracy = {fit_accuracy}: the validation metrics {sorted(val)} have no full_seq_acc; "
            "expected a task scored per sequence, or fit_accuracy = 0"
        )
    return val["full_seq_acc"] >= fit_accuracy


def _agree_on_fit(fit_step: int | None, step: int, processes: Processes, device: str) -> int | None:
    """Rank 0's verdict for every rank: ``step`` if it saw the run fit, else None."""
    return step if processes.any(processes.is_main and fit_step is not None, device) else None


def train(
    config: TrainConfig,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    metrics_fn: ValidationFn | None = None,
    fsdp: bool = False,
) -> Path:
    """Train (or continue training) a model in ``run_dir``; returns the final checkpoint directory.

    Under torchrun the model trains data-parallel (``training/distributed.py``), with DDP, or with FSDP2
    if ``fsdp`` (``training/sharding.py``).

    Writes ``run_dir/train_config.json``, ``run_dir/metrics.jsonl`` (training rows every ``log_every``
    steps, ``val_*`` rows on the task's held-out sequences every ``eval_every`` steps, from ``metrics_fn``
    or else the task's own metrics) and
    ``run_dir/checkpoints/``. Ctrl-C finishes the current step, saves a checkpoint and raises
    KeyboardInterrupt.
    """
    check_device(config.device)
    processes = join(config.device)
    try:
        if fsdp and not processes.distributed:
            raise ValueError(
                "--fsdp shards the model over several processes; expected a launch by torchrun with "
                "--nproc_per_node 2 or more (this process runs alone)"
            )
        return _train(config, processes, run_dir, resume, progress, metrics_fn, fsdp)
    finally:
        leave(processes)


def _train(config: TrainConfig, processes: Processes, run_dir, resume: bool, progress: bool, metrics_fn, fsdp) -> Path:
    _check_world_size(config, processes)
    saved_config = config.to_dict()  # what the run records: the device as given ('cuda'), for any world size
    config = dataclasses.replace(config, device=processes.device(config.device))
    main = processes.is_main
    run_dir = make_directory(run_dir, "run directory")
    metrics_path = run_dir / METRICS_NAME
    model, optimizer, start, seconds_before, fit_step = _restore(
        run_dir, TrainConfig.from_dict(saved_config), resume, config.device, processes, fsdp
    )
    if main:
        # Log rows written after the checkpoint will be produced again.
        kept = [row for row in read_jsonl(metrics_path) if row["step"] <= start] if start else []
        write_jsonl(metrics_path, kept)
        atomic_write_text(run_dir / TRAIN_CONFIG_NAME, json.dumps(saved_config, indent=2, sort_keys=True))
    task = config.task_instance()
    validation = task.validation(config.eval_sequences, config.length, VALIDATION_SEED + config.seed)
    metrics_fn = metrics_fn or task.metrics
    step_model = model
    if processes.distributed and not fsdp:
        from torch.nn.parallel import DistributedDataParallel

        cuda = torch.device(config.device).type == "cuda"
        step_model = DistributedDataParallel(model, device_ids=[processes.local_rank] if cuda else None)
    step_model = torch.compile(step_model) if config.compile else step_model
    t0 = time.perf_counter()

    def seconds() -> float:
        return seconds_before + time.perf_counter() - t0

    def save(step: int) -> None:
        """Rank 0 writes the checkpoint; with FSDP every rank takes part (gathering weights, writing shards)."""
        state = {"rng": torch.get_rng_state(), "step": step, "train_seconds": seconds()}
        if fit_step is not None:
            state["fit_step"] = fit_step
        if torch.device(config.device).type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        if not fsdp:
            if main:
                save_checkpoint(run_dir, step, model, saved_config, {**state, "optimizer": optimizer.state_dict()})
            return
        weights = full_weights(model)
        folder = processes.broadcast(new_checkpoint_folder(run_dir, step) if main else None)
        save_optimizer(model, optimizer, folder)
        processes.barrier()
        if main:
            state["optimizer"] = SHARDED
            save_checkpoint(run_dir, step, model, saved_config, state, weights=weights, tmp=folder)

    model.train()
    step = last_saved = start
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not (progress and main),
        desc=f"{config.model.attention} {run_dir.name}",
        leave=False,
    )
    clip = config.grad_clip if config.grad_clip > 0 else math.inf
    try:
        with deferred_interrupts() as interrupt:
            while step < config.steps and fit_step is None:
                lr = learning_rate(config, step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                inputs, labels = inputs_and_labels(training_batch(task, config, step))
                optimizer.zero_grad(set_to_none=True)
                _seed_step(config, step, processes)
                model.set_train_step(step)
                loss = accumulate_gradients(step_model, config, inputs, labels, processes)
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                step += 1
                bar.update(1)
                if step % config.log_every == 0 or step == config.steps:
                    loss = processes.sum(loss)  # every rank reaches this line at the same steps
                    if main:
                        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm  # FSDP
                        row = {"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()}
                        if torch.device(config.device).type == "cuda":  # allocator statistics: no device sync
                            row["peak_memory_mb"] = torch.cuda.max_memory_allocated(config.device) / 2**20
                        append_jsonl(metrics_path, {**row, "elapsed_s": seconds()})
                        bar.set_postfix(loss=f"{row['loss']:.4f}")
                # A sharded model's forward needs every rank; otherwise rank 0 validates alone.
                validates = main or fsdp
                validation_step = config.eval_every and (step % config.eval_every == 0 or step == config.steps)
                if validates and validation_step:
                    val = validate(model, config, validation, metrics_fn)
                    if main:
                        append_jsonl(metrics_path, {"step": step, **{f"val_{k}": v for k, v in val.items()}})
                    if config.fit_accuracy and _fitted(val, config.fit_accuracy):
                        fit_step = step
                        if main:
                            append_jsonl(metrics_path, {"step": step, "fit_step": step})
                if validation_step and config.fit_accuracy and processes.distributed and not fsdp:
                    fit_step = _agree_on_fit(fit_step, step, processes, config.device)  # rank 0 alone validated
                if step % config.checkpoint_every == 0 or step == config.steps or fit_step is not None:
                    save(step)
                    last_saved = step
                # Every rank stops after the same step, whichever of them saw the interrupt.
                if processes.any(interrupt.requested, config.device):
                    if step != last_saved:
                        save(step)
                    processes.barrier()
                    if main:
                        print(f"\ninterrupted after step {step}: saved a checkpoint; continue with --resume")
                    raise KeyboardInterrupt
    finally:
        bar.close()
    processes.barrier()  # the last checkpoint is on disk before any rank returns it
    return latest_checkpoint(run_dir)
