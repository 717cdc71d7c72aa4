"""The task-agnostic training loop: AdamW, cosine schedule, clipping, gradient accumulation, autocast,
optional torch.compile, data parallelism under torchrun, JSONL metrics, periodic validation,
checkpoints and exact resume.

A step sets the learning rate, builds the step's batch, seeds dropout, accumulates the gradients, clips
and steps the optimizer; then, when due, it writes a metrics row (``metrics_log.py``), validates and asks
whether the run has fitted (``validator.py``), saves a checkpoint (``checkpointer.py``), and stops if
Ctrl-C was pressed or SIGTERM received (``interrupt.py``). A run starts fresh or from its latest checkpoint
(``resume.py``). A non-finite loss, gradient norm or weight stops it with ``TrainingDiverged`` naming the
step and the last finite checkpoint (``divergence.py``).

Batches are a pure function of (seed, step), the model computes its own per-token loss, and the
optimizer and RNG states are checkpointed between whole steps only (Ctrl-C and SIGTERM wait for the step
to finish), so ``--resume`` continues exactly: N/2 steps + resume + N/2 steps gives bit-identical weights
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
from pathlib import Path
from typing import NoReturn

import torch
from tqdm.auto import tqdm

from ..data import Task, TaskBatch, check_scored
from ..models import IGNORE_INDEX, TransformerLM
from ..utils.atomic import atomic_write_text, make_directory
from ..utils.os_errors import writing
from .checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint
from .checkpointer import Checkpointer
from .config import TrainConfig, check_device
from .distributed import Processes, join, leave
from .divergence import DivergenceWatch
from .interrupt import Interrupted, deferred_interrupts
from .length_spread import spread_batch
from .metrics_log import METRICS_NAME, MetricsLog
from .optim import learning_rate
from .resume import restore
from .validator import VALIDATION_SEED, ValidationFn, Validator

ONE_PROCESS = Processes()


def batch_seed(seed: int, step: int) -> int:
    """The seed of step ``step``'s batch, in [0, 2**63) for every seed there (the same as without the modulo
    for every seed below 9e12, so older runs keep their batches)."""
    return (seed * 1_000_003 + step) % (1 << 63)


def training_batch(task: Task, config: TrainConfig, step: int) -> TaskBatch:
    """The global batch of ``step``: the same for any accumulation (or, later, any number of processes); with
    ``length_spread``, rows of packed documents of varied length (``length_spread.py``)."""
    seed = batch_seed(config.seed, step)
    if config.length_spread:
        return spread_batch(task, config.batch_size, config.length, seed, config.length_spread)
    return task.sample(config.batch_size, config.length, seed)


def inputs_and_labels(batch: TaskBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, L-1) and labels (N, L-1): the next tokens (or the batch's targets), IGNORE_INDEX where nothing is
    scored."""
    return batch.tokens[:, :-1], batch.labels[:, 1:].masked_fill(~batch.loss_mask[:, 1:], IGNORE_INDEX)


def model_arguments(batch: TaskBatch) -> dict[str, torch.Tensor]:
    """The batch's per-token keyword arguments of the model at the input positions, each (N, L-1)."""
    return {name: value[:, :-1] for name, value in batch.model_args.items()}


def autocast(config: TrainConfig):
    """bf16 autocast of the forward pass, or a no-op for fp32."""
    device_type = torch.device(config.device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.precision == "bf16")


def accumulate_gradients(
    model,
    config: TrainConfig,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    processes: Processes = ONE_PROCESS,
    arguments: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Backward of the mean loss over every scored token of the global batch, from this rank's rows in
    ``grad_accum`` micro-batches; ``arguments`` (N, L-1 each, from ``model_arguments``) go to the model as
    keywords, cut into the same rows.

    Each micro-batch's summed loss is divided by the scored tokens of the whole global batch (and
    multiplied by the number of ranks, whose gradients DistributedDataParallel averages), so the gradient
    equals that of one pass over the whole batch (exactly so without dropout, up to the order of fp32
    sums). Returns this rank's share of the mean loss (the shares of all ranks sum to it).
    """
    scored = int((labels != IGNORE_INDEX).sum())
    rows = processes.rows(config.batch_size)
    inputs, labels = inputs[rows], labels[rows]
    arguments = {name: value[rows] for name, value in (arguments or {}).items()}
    total = torch.zeros((), device=config.device)
    size = config.batch_size // (config.grad_accum * processes.world_size)
    starts = range(0, len(inputs), size)
    for start in starts:
        x = inputs[start : start + size].to(config.device)
        y = labels[start : start + size].to(config.device)
        extra = {name: value[start : start + size].to(config.device) for name, value in arguments.items()}
        last = start == starts[-1]
        # Gradients are all-reduced (DDP) or reduce-scattered (FSDP) only after the last micro-batch.
        if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
            model.set_requires_gradient_sync(last)
        sync = model.no_sync() if hasattr(model, "no_sync") and not last else contextlib.nullcontext()
        with sync:
            with autocast(config):
                per_token = model(x, labels=y, **extra)
            loss = per_token.sum() / max(scored, 1)
            objective = loss
            auxiliary = _auxiliary_loss(model)
            if auxiliary is not None:  # a mean over this micro-batch's rows: weighted by its share of the batch
                objective = loss + auxiliary * (len(x) / config.batch_size)
            (objective * processes.world_size).backward()
        total += loss.detach()
    return total


def _auxiliary_loss(model: torch.nn.Module) -> torch.Tensor | None:
    """The model's auxiliary loss of its last forward (TRA's keep_penalty), or None: a model without the
    hook (a user's own) adds nothing. DDP wraps the model in `.module`; FSDP2 does not wrap it."""
    hook = getattr(getattr(model, "module", model), "auxiliary_loss", None)
    return hook() if callable(hook) else None


def _seed_step(config: TrainConfig, step: int, processes: Processes) -> None:
    """With several ranks, dropout draws from a generator seeded by (seed, step, rank): checkpoints then need
    no per-rank RNG state, and a resumed run draws what an uninterrupted one would. One process keeps the
    checkpointed stream (as in 0.1 and 0.2)."""
    if processes.distributed:
        torch.manual_seed((batch_seed(config.seed, step) * 65_537 + processes.rank) % (1 << 63))


def _check_world_size(config: TrainConfig, processes: Processes) -> None:
    """A ValueError unless the global batch splits into equal micro-batches over the ranks."""
    parts = config.grad_accum * processes.world_size
    if config.batch_size % parts:
        raise ValueError(
            f"batch_size = {config.batch_size}; expected a multiple of grad_accum x processes = "
            f"{config.grad_accum} x {processes.world_size} = {parts} (every rank trains on equal micro-batches)"
        )


def _check_something_to_score(task: Task, config: TrainConfig) -> None:
    """A ValueError (``check_scored``) if the validation sequences (fixed for the whole run) hold no scored token, or
    without validation the first training batch: task parameters that leave nothing to score give a loss of 0 over
    no tokens and NaN validations."""
    if config.eval_every:
        validation = task.validation(config.eval_sequences, config.length, VALIDATION_SEED + config.seed)
        check_scored(validation, f"the {task.name} task's validation sequences ({task})")
    else:
        check_scored(training_batch(task, config, 0), f"the {task.name} task's first training batch ({task})")


def _due(step: int, every: int, steps: int) -> bool:
    """Whether a periodic event (a log row, a checkpoint) falls after ``step``: every ``every`` steps and the last."""
    return step % every == 0 or step == steps


class TrainingTime:
    """Seconds of training so far: those before the checkpoint resumed from, plus this process's since ``start``."""

    def __init__(self, before: float):
        self.before, self.t0 = before, None

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self) -> float:
        return self.before + time.perf_counter() - self.t0


def _step_model(model: TransformerLM, config: TrainConfig, processes: Processes, fsdp: bool) -> torch.nn.Module:
    """The module that trains: ``model`` in DistributedDataParallel when several ranks share it unsharded,
    compiled if ``config.compile``."""
    step_model = model
    if processes.distributed and not fsdp:
        from torch.nn.parallel import DistributedDataParallel

        cuda = torch.device(config.device).type == "cuda"
        step_model = DistributedDataParallel(model, device_ids=[processes.local_rank] if cuda else None)
    return torch.compile(step_model) if config.compile else step_model


def _stop(signum: int, step: int, fit_step: int | None, checkpointer: Checkpointer, watch: DivergenceWatch) -> NoReturn:
    """Stop after ``step`` on signal ``signum`` (every rank calls this): checkpoint it unless just saved (and
    unless it diverged), then raise Interrupted once every rank is done."""
    processes = checkpointer.processes
    if step != checkpointer.last_step:
        watch.check(processes, checkpointer.run_dir)
        checkpointer.save(step, fit_step)
    processes.barrier()
    raise Interrupted(signum, step)


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
    ``run_dir/checkpoints/``. Ctrl-C or SIGTERM finishes the current step, saves a checkpoint and raises
    ``Interrupted`` (a KeyboardInterrupt); a non-finite loss, gradient norm or weight raises
    ``TrainingDiverged`` (a ValueError) without saving.
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
    """``train`` on this rank, once it has joined the others."""
    _check_world_size(config, processes)
    saved_config = config.to_dict()  # what the run records: the device as given ('cuda'), for any world size
    config = dataclasses.replace(config, device=processes.device(config.device))
    main = processes.is_main
    task = config.task_instance()
    task.check_data()  # before the run directory exists: a missing corpus leaves nothing behind
    if config.fit_accuracy and metrics_fn is None and not task.scored_per_sequence:
        raise ValueError(
            f"--fit-accuracy (TrainConfig.fit_accuracy) = {config.fit_accuracy}: the {task.name} task's validation "
            "has no full-sequence accuracy to train to fit on; expected no --fit-accuracy, or 0"
        )
    _check_something_to_score(task, config)  # before the run directory exists
    run_dir = make_directory(run_dir, "run directory")
    model, optimizer, start, seconds_before, fit_step = restore(
        run_dir, TrainConfig.from_dict(saved_config), resume, config.device, processes, fsdp
    )
    seconds = TrainingTime(seconds_before)
    log = MetricsLog(run_dir / METRICS_NAME, processes, config.device, seconds)
    log.restart_after(start)
    if main:
        with writing("training config", run_dir / TRAIN_CONFIG_NAME):
            atomic_write_text(run_dir / TRAIN_CONFIG_NAME, json.dumps(saved_config, indent=2, sort_keys=True))
    validator = Validator(model, config, task, metrics_fn or task.metrics, processes, fsdp)
    step_model = _step_model(model, config, processes, fsdp)
    checkpointer = Checkpointer(run_dir, saved_config, model, optimizer, processes, fsdp, config.device, seconds, start)
    seconds.start()
    model.train()
    step = start
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not (progress and main),
        desc=f"{config.model.attention} {run_dir.name}",
        leave=False,
    )
    clip = config.grad_clip if config.grad_clip > 0 else math.inf
    watch = DivergenceWatch(config.device)
    try:
        with deferred_interrupts(announce=main) as interrupt:
            while step < config.steps and fit_step is None:
                lr = learning_rate(config, step)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                batch = training_batch(task, config, step)
                inputs, labels = inputs_and_labels(batch)
                optimizer.zero_grad(set_to_none=True)
                _seed_step(config, step, processes)
                model.set_train_step(step)
                loss = accumulate_gradients(step_model, config, inputs, labels, processes, model_arguments(batch))
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                optimizer.step()
                step += 1
                bar.update(1)
                watch.note(step, loss, grad_norm)
                saving = _due(step, config.checkpoint_every, config.steps)
                logging = _due(step, config.log_every, config.steps)
                if logging or saving or validator.due(step):  # where the loop reads the device anyway
                    watch.check(processes, run_dir)
                if logging:
                    row = log.training(step, loss, lr, grad_norm)  # every rank reaches this line at the same steps
                    if row is not None:
                        bar.set_postfix(loss=f"{row['loss']:.4f}")
                if validator.due(step):
                    val = validator.validate()
                    log.validation(step, val)
                    if validator.fitted(val):
                        fit_step = step
                        log.fit(step)
                if saving or fit_step is not None:
                    checkpointer.save(step, fit_step)
                # Every rank stops after the same step, whichever of them saw the signal.
                signum = processes.max(interrupt.signum, config.device)
                if signum:
                    _stop(signum, step, fit_step, checkpointer, watch)
    finally:
        bar.close()
    processes.barrier()  # the last checkpoint is on disk before any rank returns it
    return latest_checkpoint(run_dir)
