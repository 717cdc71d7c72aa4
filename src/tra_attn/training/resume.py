"""Starting a run in training: fresh, or from its latest checkpoint once the config is checked against
the saved one (the same, or only more ``steps``), with the optimizer and RNG state restored."""

from __future__ import annotations

from pathlib import Path

import torch

from ..data import absolute_task_args, recorded_task_args
from ..models import TransformerLM
from ..utils.checks import is_int
from ..utils.dataclass_io import OldVersion
from .checkpoint import (
    TRAIN_STATE_NAME,
    latest_checkpoint,
    list_checkpoints,
    load_train_state,
    remove_interrupted_writes,
)
from .config import TrainConfig
from .distributed import Processes
from .optim import build_optimizer
from .sharding import SHARDED, load_optimizer, shard


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
    saved, current = TrainConfig.from_dict(saved).to_dict(), config.to_dict()
    # Paths compare as absolute ones: older runs (and the Python API) may hold them relative.
    saved["task_args"] = recorded_task_args(saved["task"], saved["task_args"], checkpoint)
    current["task_args"] = absolute_task_args(current["task"], current["task_args"])
    differences = config_differences(saved, current)
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


def check_step(checkpoint: Path, step) -> None:
    """A ValueError unless the training state's ``step`` is the one the folder's name (step_0000040) says:
    a checkpoint copied or renamed by hand would otherwise resume at another step than the one it claims."""
    named = int(checkpoint.name.removeprefix("step_"))
    if not is_int(step) or step != named:
        raise ValueError(
            f"checkpoint {checkpoint}: {TRAIN_STATE_NAME} holds step = {step!r}; expected {named}, the step its "
            "folder is named for (a checkpoint renamed or copied over another?)"
        )


def _load_latest(run_dir: Path, checkpoint: Path, device: str):
    """(train config dict, train state, model) of the latest checkpoint; if it cannot be loaded, the
    error names the newest earlier checkpoint that can, and how to resume from it (where none can and the latest
    is of an earlier version, the run is: its OldVersion, which names `tra upgrade`)."""

    def load(path: Path):
        saved, state = load_train_state(path)
        check_step(path, state["step"])
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
        if isinstance(err, OldVersion):  # not damage: the run is of an earlier version, which `tra upgrade` converts
            raise
        raise ValueError(
            f"--resume: the latest checkpoint cannot be loaded ({err}); no earlier one is intact"
        ) from None


def restore(run_dir: Path, config: TrainConfig, resume: bool, device: str, processes: Processes, fsdp: bool):
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
    threads, cpu = state.get("cpu_threads"), torch.device(device).type == "cpu"
    if cpu and threads is not None and threads != torch.get_num_threads() and processes.is_main:
        print(
            f"--resume: {checkpoint} was trained on {threads} CPU threads, this process has "
            f"{torch.get_num_threads()}: the run continues exactly as far as the order of floating-point sums "
            f"allows (set OMP_NUM_THREADS={threads} for a bit-identical continuation)"
        )
    if "cuda_rng" in state and not processes.distributed:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return model, optimizer, state["step"], state.get("train_seconds", 0.0), fit_step
