"""Training configuration: model, task, optimiser, schedule and runtime in one dataclass, saved as JSON.

Written with ``"version": 7``, the model config nested with its own version. Only the current version is
read: a file of an earlier one is refused naming ``tra upgrade PATH``, which converts it in place
(``tra_attn/upgrade``), so old checkpoints load and resume after one command.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..data import make_task
from ..layers import check_model_config
from ..models import ModelConfig
from ..utils.checks import (
    boolean,
    check_declared,
    in_range,
    is_int,
    non_negative_int,
    option,
    positive_int,
)
from ..utils.dataclass_io import current_fields, dataclass_from_dict
from .length_spread import check_spread_lengths

VERSION = 7
DEVICE_TYPES = ("cpu", "cuda")
SEED_LIMIT = 2**63  # seeds are in [0, 2**63): torch's generators take a signed 64-bit integer


def seed_check(value) -> str | None:
    """None for a seed (an integer in [0, 2**63)), else what a seed is."""
    return None if is_int(value) and 0 <= value < SEED_LIMIT else "an integer seed in [0, 2**63)"


def check_seed(value, what: str):
    """``value`` if it is a seed, else a ValueError naming ``what`` (a field or flag)."""
    if expected := seed_check(value):
        raise ValueError(f"{what} = {value!r}; expected {expected}")
    return value


def check_spread(task, length: int, spread: float) -> None:
    """A ValueError if the task's rows cannot take packed documents (they pack their own already), or if the
    spread has no shorter valid length of the task to draw (``length_spread.check_spread_lengths``)."""
    if task.sample(1, length, 0).model_args:
        raise ValueError(
            f"TrainConfig.length_spread = {spread}: the {task.name} task's rows already pack documents; expected 0"
        )
    check_spread_lengths(task, length, spread)


def _precision(value) -> str | None:
    return None if value in ("fp32", "bf16") else "'fp32' or 'bf16'"


def task_args_check(value) -> str | None:
    """None for task parameters (a dict), else what they are."""
    return None if isinstance(value, dict) else "a dict of task parameters"


@dataclass
class TrainConfig:
    """Everything a run needs; saved as JSON next to every checkpoint. Each field declares its help and its check
    (``utils/checks.py``); ``__post_init__`` keeps the rules that span fields and the task's own."""

    task: str = option(help="the task to train on (a registered name)")
    model: ModelConfig = option(default_factory=ModelConfig)
    task_args: dict = option(help="the task's parameters (its own defaults otherwise)", check=task_args_check,
                             default_factory=dict)  # fmt: skip
    length: int = option(128, "tokens per training sequence", positive_int)
    steps: int = option(1500, "optimizer steps (with fit_accuracy: the most it may take)", positive_int)
    batch_size: int = option(64, "sequences per optimizer step", positive_int)
    grad_accum: int = option(1, "micro-batches per step (must divide batch_size; same update, less memory)",
                             positive_int)  # fmt: skip
    lr: float = option(1e-3, "peak learning rate", in_range(1e-300, math.inf))
    min_lr_ratio: float = option(0.0, "final learning rate / peak (cosine schedule)", in_range(0.0, 1.0, True))
    warmup_steps: int = option(0, "linear warm-up steps", non_negative_int)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and norms)", in_range(0.0, math.inf))
    beta1: float = option(0.9, "AdamW beta1", in_range(0.0, 1.0))
    beta2: float = option(0.999, "AdamW beta2", in_range(0.0, 1.0))
    grad_clip: float = option(1.0, "gradient-norm clipping; 0 disables it", in_range(0.0, math.inf))
    seed: int = option(0, "seed of the initialisation, the batches and dropout", seed_check)
    log_every: int = option(25, "steps between training-loss rows in metrics.jsonl", positive_int)
    eval_every: int = option(250, "steps between validations; 0 disables them", non_negative_int)
    eval_sequences: int = option(512, "held-out validation sequences", positive_int)
    checkpoint_every: int = option(500, "steps between checkpoints", positive_int)
    device: str = option("cpu", "cpu, cuda or cuda:N")
    precision: str = option("fp32", "fp32, or bf16 (autocast the forward: GPU training)", _precision)
    compile: bool = option(False, "torch.compile the model for training", boolean)
    length_spread: float = option(
        0.0,
        "training rows pack whole documents of lengths drawn from [(1 - length_spread) length, length] (the number "
        "of irrelevant tokens varies in training; validation stays at length); 0: one sequence per row",
        in_range(0.0, 1.0, what="a fraction", note=" (0: off)"),
    )
    fit_accuracy: float = option(
        0.0,
        "train to fit: stop at the first validation whose full-sequence accuracy reaches this value, with steps as "
        "the cap (needs eval_every > 0 and a task scored per sequence; 0: train all steps)",
        in_range(0.0, 1.0, True, note=" (0: off)"),
    )

    def __post_init__(self):
        if isinstance(self.model, dict):  # built in Python with a dict: unset fields take their defaults
            self.model = ModelConfig.from_dict(self.model, partial=True)
        check_model_config(self.model)  # before any training work: the kind exists and can run this model
        check_declared(self)
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"TrainConfig.grad_accum = {self.grad_accum}; expected a divisor of batch_size = {self.batch_size}"
            )
        if self.fit_accuracy and not self.eval_every:
            raise ValueError(
                f"TrainConfig.fit_accuracy = {self.fit_accuracy} needs periodic validation; expected eval_every > 0"
            )
        task = self.task_instance()  # validates the task name and arguments
        task.check_length(self.length)
        span = getattr(self.model.attention_options, "random_positions", 0)
        if span and span < self.length:
            raise ValueError(
                f"{type(self.model.attention_options).__name__}.random_positions = {span}: training rows of length "
                f"{self.length} draw their positions from [0, {span}); expected random_positions >= {self.length}"
            )
        if self.length_spread:
            check_spread(task, self.length, self.length_spread)
        if self.model.tokenizer != task.tokenizer_description():
            raise ValueError(
                f"ModelConfig.tokenizer = {self.model.tokenizer!r}; expected the {self.task} task's "
                f"{task.tokenizer_description()!r}"
            )
        if self.model.vocab_size < task.vocab_size:
            raise ValueError(
                f"ModelConfig.vocab_size = {self.model.vocab_size}; expected at least the "
                f"{self.task} vocabulary size {task.vocab_size}"
            )

    def task_instance(self):
        return make_task(self.task, **self.task_args)

    def to_dict(self) -> dict:
        return {"version": VERSION, **dataclasses.asdict(self), "model": self.model.to_dict()}

    @classmethod
    def from_dict(cls, data: dict, partial: bool = False, where=None) -> TrainConfig:
        """Unknown fields are errors, and so are missing ones unless ``partial`` (a hand-written file that relies
        on the defaults). Only the current version is read, the model's too: an earlier one is refused, naming
        ``tra upgrade`` (``where``: the file, for the message)."""
        data = current_fields(cls.__name__, data, VERSION, where, partial)
        if isinstance(data.get("model"), dict):
            data["model"] = ModelConfig.from_dict(data["model"], partial=partial, where=where)
        return dataclass_from_dict(cls, data, required=not partial, where=where)


def check_device(device) -> str:
    """A device string this machine can run on, or a ValueError saying why not."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device = {device!r}; expected 'cpu', 'cuda' or 'cuda:N' ({err})") from None
    if parsed.type not in DEVICE_TYPES:
        raise ValueError(f"device = {device!r}; expected 'cpu', 'cuda' or 'cuda:N'")
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device = {device!r}, but this machine has no CUDA device; expected 'cpu'")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(f"device = {device!r}; expected an index below {torch.cuda.device_count()}")
    return device
