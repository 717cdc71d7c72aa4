"""Training configuration: model, task, optimiser, schedule and runtime in one dataclass, saved as JSON.

Written with ``"version": 7``, the model config nested with its own version. Only the current version is
read: a file of an earlier one is refused naming ``tra upgrade PATH``, which converts it in place
(``tra_attn/upgrade``), so old checkpoints load and resume after one command.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from ..data import make_task
from ..layers import check_model_config
from ..models import ModelConfig
from ..utils.checks import is_int, is_number
from ..utils.dataclass_io import current_fields, dataclass_from_dict
from .length_spread import check_spread_lengths

VERSION = 7
DEVICE_TYPES = ("cpu", "cuda")
SEED_LIMIT = 2**63  # seeds are in [0, 2**63): torch's generators take a signed 64-bit integer


def check_seed(value, what: str):
    """``value`` if it is a seed (an integer in [0, 2**63)), else a ValueError naming ``what`` (a field or flag)."""
    if not is_int(value) or not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{what} = {value!r}; expected an integer seed in [0, 2**63)")
    return value


def check_spread(task, length: int, spread: float) -> None:
    """A ValueError if the task's rows cannot take packed documents (they pack their own already), or if the
    spread has no shorter valid length of the task to draw (``length_spread.check_spread_lengths``)."""
    if task.sample(1, length, 0).model_args:
        raise ValueError(
            f"TrainConfig.length_spread = {spread}: the {task.name} task's rows already pack documents; expected 0"
        )
    check_spread_lengths(task, length, spread)


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class TrainConfig:
    """Everything a run needs; saved as JSON next to every checkpoint."""

    task: str = field(metadata=_help("the task to train on (a registered name)"))
    model: ModelConfig = field(default_factory=ModelConfig)
    task_args: dict = field(default_factory=dict, metadata=_help("the task's parameters (its own defaults otherwise)"))
    length: int = field(default=128, metadata=_help("tokens per training sequence"))
    steps: int = field(default=1500, metadata=_help("optimizer steps (with fit_accuracy: the most it may take)"))
    batch_size: int = field(default=64, metadata=_help("sequences per optimizer step"))
    grad_accum: int = field(
        default=1, metadata=_help("micro-batches per step (must divide batch_size; same update, less memory)")
    )
    lr: float = field(default=1e-3, metadata=_help("peak learning rate"))
    min_lr_ratio: float = field(default=0.0, metadata=_help("final learning rate / peak (cosine schedule)"))
    warmup_steps: int = field(default=0, metadata=_help("linear warm-up steps"))
    weight_decay: float = field(default=0.01, metadata=_help("AdamW weight decay (not on biases and norms)"))
    beta1: float = field(default=0.9, metadata=_help("AdamW beta1"))
    beta2: float = field(default=0.999, metadata=_help("AdamW beta2"))
    grad_clip: float = field(default=1.0, metadata=_help("gradient-norm clipping; 0 disables it"))
    seed: int = field(default=0, metadata=_help("seed of the initialisation, the batches and dropout"))
    log_every: int = field(default=25, metadata=_help("steps between training-loss rows in metrics.jsonl"))
    eval_every: int = field(default=250, metadata=_help("steps between validations; 0 disables them"))
    eval_sequences: int = field(default=512, metadata=_help("held-out validation sequences"))
    checkpoint_every: int = field(default=500, metadata=_help("steps between checkpoints"))
    device: str = field(default="cpu", metadata=_help("cpu, cuda or cuda:N"))
    precision: str = field(default="fp32", metadata=_help("fp32, or bf16 (autocast the forward: GPU training)"))
    compile: bool = field(default=False, metadata=_help("torch.compile the model for training"))
    length_spread: float = field(
        default=0.0,
        metadata=_help(
            "training rows pack whole documents of lengths drawn from [(1 - length_spread) length, length] (the "
            "number of irrelevant tokens varies in training; validation stays at length); 0: one sequence per row"
        ),
    )
    fit_accuracy: float = field(
        default=0.0,
        metadata=_help(
            "train to fit: stop at the first validation whose full-sequence accuracy reaches this value, with "
            "steps as the cap (needs eval_every > 0 and a task scored per sequence; 0: train all steps)"
        ),
    )

    def __post_init__(self):
        if isinstance(self.model, dict):  # built in Python with a dict: unset fields take their defaults
            self.model = ModelConfig.from_dict(self.model, partial=True)
        check_model_config(self.model)  # before any training work: the kind exists and can run this model
        if not isinstance(self.task_args, dict):
            raise ValueError(f"TrainConfig.task_args = {self.task_args!r}; expected a dict of task parameters")
        positive = ("length", "steps", "batch_size", "grad_accum", "log_every", "eval_sequences", "checkpoint_every")
        for name in positive:
            value = getattr(self, name)
            if not is_int(value) or value <= 0:
                raise ValueError(f"TrainConfig.{name} = {value!r}; expected a positive integer")
        check_seed(self.seed, "TrainConfig.seed")
        for name in ("warmup_steps", "eval_every"):
            value = getattr(self, name)
            if not is_int(value) or value < 0:
                raise ValueError(f"TrainConfig.{name} = {value!r}; expected a non-negative integer")
        if self.batch_size % self.grad_accum:
            raise ValueError(
                f"TrainConfig.grad_accum = {self.grad_accum}; expected a divisor of batch_size = {self.batch_size}"
            )
        ranges = {  # name: (lowest allowed, highest allowed, whether the highest is allowed)
            "lr": (1e-300, math.inf, False),
            "min_lr_ratio": (0.0, 1.0, True),
            "weight_decay": (0.0, math.inf, False),
            "beta1": (0.0, 1.0, False),
            "beta2": (0.0, 1.0, False),
            "grad_clip": (0.0, math.inf, False),
        }
        for name, (low, high, high_ok) in ranges.items():
            value = getattr(self, name)
            ok = is_number(value) and low <= value and (value < high or (high_ok and value == high))
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} = {value!r}; expected a number in [{low:g}, {high:g}{']' if high_ok else ')'}"
                )
        if not (is_number(self.fit_accuracy) and 0.0 <= self.fit_accuracy <= 1.0):
            raise ValueError(f"TrainConfig.fit_accuracy = {self.fit_accuracy!r}; expected a number in [0, 1] (0: off)")
        if self.fit_accuracy and not self.eval_every:
            raise ValueError(
                f"TrainConfig.fit_accuracy = {self.fit_accuracy} needs periodic validation; expected eval_every > 0"
            )
        spread = self.length_spread
        if not (is_number(spread) and 0.0 <= spread < 1.0):
            raise ValueError(f"TrainConfig.length_spread = {spread!r}; expected a fraction in [0, 1) (0: off)")
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"TrainConfig.precision = {self.precision!r}; expected 'fp32' or 'bf16'")
        if not isinstance(self.compile, bool):
            raise ValueError(f"TrainConfig.compile = {self.compile!r}; expected true or false")
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
