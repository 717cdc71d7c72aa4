"""The protocol every task follows (procedural ones in ``synthetic/``, text in ``text/``), and the task registry.

A task is a frozen dataclass whose fields are its parameters (they become ``tra data TASK`` flags and
``TrainConfig.task_args``), each declared with ``option(default, help, check)`` (``utils/checks.py``), whose
check refuses a bad value as ``name: field = value; expected ...``. It generates batches as a pure function of
(num, length, seed), marks the tokens that are scored, names its out-of-distribution test splits, and converts
sequences to and from text. Everything above the data (training, metrics, reports) sees only this protocol.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from ..utils.checks import check_declared, is_int

TEST_SEED = 3_000_000_000  # test sets are shared by every method and seed; split k uses TEST_SEED + k


@dataclass
class TaskBatch:
    """tokens (N, L) int64 and loss_mask (N, L) bool: True at the tokens that are scored.

    ``model_args``: per-token keyword arguments of the model's forward beside the ids, each (N, L) and
    aligned with ``tokens`` (e.g. ``segment_ids``, the document of each token of a packed window); a
    training step passes each at the input positions (the first L - 1), sliced with the rows it trains on.

    ``targets``: (N, L) int64 for a task whose answers are not its inputs (a label per token, as token
    classification): the prediction at position j is scored against ``targets[:, j + 1]`` where ``loss_mask``, as
    it is against ``tokens[:, j + 1]`` without them. None: next-token prediction (``labels`` is the tokens).
    """

    tokens: torch.Tensor
    loss_mask: torch.Tensor
    model_args: dict[str, torch.Tensor] = field(default_factory=dict)
    targets: torch.Tensor | None = None

    @property
    def labels(self) -> torch.Tensor:
        """(N, L): what the prediction at position j - 1 is scored against at j: the targets, or the tokens."""
        return self.tokens if self.targets is None else self.targets

    def to(self, device) -> TaskBatch:
        """The same batch with every tensor on ``device``."""
        return TaskBatch(
            self.tokens.to(device),
            self.loss_mask.to(device),
            {name: value.to(device) for name, value in self.model_args.items()},
            None if self.targets is None else self.targets.to(device),
        )


@dataclass(frozen=True)
class EvalSplit:
    """One test set: a name (e.g. 'iid', 'sparse'), the task parameters it uses, its sequences, and the
    length its rows report (default: the sequences' length in tokens)."""

    split: str
    params: dict
    batch: TaskBatch
    length: int | None = None


class Task:
    """Base class of procedural tasks; subclasses are frozen dataclasses registered with ``register_task``."""

    name: ClassVar[str]
    vocab_size: ClassVar[int]
    has_text_format: ClassVar[bool] = True  # one sequence per line of text (``tra data``, ``tra eval --data``)
    # Whether the task's metrics hold a full-sequence accuracy (``full_seq_acc``), which training to fit reads.
    scored_per_sequence: ClassVar[bool] = True
    # Peak bytes per token of ``sample`` and ``write_text`` together: the ids, the mask and the generator's
    # intermediates (measured: 13-49 bytes on the procedural tasks, as max RSS over 2M tokens), rounded up.
    memory_per_token: ClassVar[int] = 64
    # The one task `tra train` trains on when neither --task nor a config names one (``default_task``).
    is_default: ClassVar[bool] = False

    def __post_init__(self):
        """The declared check of each parameter (``option``), in declaration order: a ValueError
        ``name: field = value; expected ...`` for the first that fails. A task whose rules span parameters
        overrides this, calls it first, then checks them."""
        check_declared(self, prefix=f"{self.name}: ")

    def check_length(self, length) -> int:
        """``length`` if sequences of that many tokens exist, else a ValueError naming it."""
        if not is_int(length) or length <= 0:
            raise ValueError(f"{self.name}: length = {length!r}; expected a positive number of tokens")
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens; the same arguments always give the same batch."""
        raise NotImplementedError

    def check_data(self) -> None:
        """A ValueError if data the task reads are missing, so commands fail before creating any output;
        generated tasks read none."""

    def tokenizer_description(self) -> dict | None:
        """The text tokenizer behind the task's ids (saved with the model), or None for a task vocabulary."""
        return None

    def validation(self, num: int, length: int, seed: int) -> TaskBatch:
        """Held-out sequences for validation during training; by default fresh samples from ``seed``."""
        return self.sample(num, length, seed)

    def metrics(self, model, batch: TaskBatch) -> dict:
        """Evaluation metrics of ``model`` on ``batch`` (on the model's device); by default accuracy over the
        scored tokens."""
        from ..metrics import sequence_metrics

        return sequence_metrics(model, batch.tokens, batch.loss_mask, targets=batch.targets)

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """The standard test sets for a model trained on ``train_length``-token sequences."""
        raise NotImplementedError

    def full_test_length(self, train_length: int) -> int:
        """The longest test length whose splits hold the whole budget of sequences (longer ones hold as many tokens
        as it does): by default the training length; a protocol read to 0.01 per cell goes further."""
        return train_length

    def split_size(self, sequences: int, train_length: int, length: int) -> int:
        """Sequences of the test split at ``length`` under a budget of ``sequences`` (``full_test_length``)."""
        return split_sequences(sequences, self.full_test_length(train_length), length)

    def encode_text(self, line: str) -> torch.Tensor:
        """One sequence from its text form (as written by ``decode_text``)."""
        raise NotImplementedError

    def decode_text(self, tokens: torch.Tensor) -> str:
        raise NotImplementedError

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """The scored positions of sequences read from text."""
        raise NotImplementedError

    def statistics(self, batch: TaskBatch) -> dict:
        """Summary numbers of a batch (printed by ``tra data``, tabulated by reports)."""
        return {"sequences": batch.tokens.shape[0], "length": batch.tokens.shape[1]}

    def key_roles(self, tokens: torch.Tensor) -> tuple[tuple[str, ...], torch.Tensor] | None:
        """What each key is to the queries that predict scored tokens, for diagnosis (``tra inspect``): the role
        names and, per sequence, the role index of every key (N, L), or of every key for the query at each
        position (N, L, L: row i for the query at i, the token before a scored one). None: the task names none.
        """
        return None

    def write_text(self, path: str | Path, batch: TaskBatch) -> None:
        """One sequence per line, written atomically."""
        from ..utils.atomic import atomic_write_text

        atomic_write_text(path, "".join(self.decode_text(row) + "\n" for row in batch.tokens))

    @classmethod
    def path_arguments(cls, args: dict) -> list[str]:
        """The names of the arguments in ``args`` that are file-system paths (none by default)."""
        return []

    def batch_of(self, tokens: torch.Tensor) -> TaskBatch:
        """``tokens`` (N, L), the task's sequences (read from text, say), as a batch: their loss mask, and their
        targets where the task's answers are not its inputs (such a task overrides this)."""
        return TaskBatch(tokens, self.loss_mask(tokens))

    def read_text(self, path: str | Path) -> list[TaskBatch]:
        """Sequences from a text file (one per line), grouped into one batch per sequence length."""
        path = Path(path)
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise ValueError(f"{self.name}: data file {path} {what}; expected a text file, one sequence per line")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"{self.name}: data file {path} is not UTF-8 text ({err})") from None
        lines = [line for line in text.splitlines() if line.strip()]
        if not lines:
            raise ValueError(f"{self.name}: data file {path} is empty; expected one sequence per line")
        by_length: dict[int, list[torch.Tensor]] = {}
        for number, line in enumerate(lines, 1):
            try:
                tokens = self.encode_text(line)
            except ValueError as err:
                raise ValueError(f"{path}:{number}: {err}") from None
            by_length.setdefault(len(tokens), []).append(tokens)
        batches = []
        for length in sorted(by_length):
            tokens = torch.stack(by_length[length])
            batches.append(self.batch_of(tokens))
        return batches


def check_scored(batch: TaskBatch, what: str) -> TaskBatch:
    """``batch``, or a ValueError naming ``what`` if none of its tokens is scored: such data train nothing (a loss
    of 0 over no tokens) and score NaN, so every path that hands a batch to a file, a training run or an evaluation
    refuses it first. (A sequence without a scored token among others is fine: metrics leave it out.)"""
    if not bool(batch.loss_mask.any()):
        n, length = batch.tokens.shape
        raise ValueError(
            f"{what}: the {n} sequence{'s' if n != 1 else ''} of {length} tokens hold no scored token; expected "
            "data with something to score (change the task's parameters or the length)"
        )
    return batch


def split_sequences(sequences: int, full_length: int, length: int) -> int:
    """Sequences for a test split: ``sequences`` up to ``full_length`` (the training length, by default), the same
    token budget beyond it."""
    return max(1, sequences * full_length // max(length, full_length))


TASKS: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` available by ``cls.name`` to ``make_task``, the CLI and configs."""
    if cls.name in TASKS and TASKS[cls.name] is not cls:
        raise ValueError(f"register_task: a task named {cls.name!r} is already registered")
    TASKS[cls.name] = cls
    return cls


def default_task() -> str:
    """The name of the registered task that says it is the default (``Task.is_default``): exactly one does."""
    defaults = sorted(name for name, cls in TASKS.items() if cls.is_default)
    if len(defaults) != 1:
        raise RuntimeError(f"registered tasks: default tasks = {defaults}; expected exactly one (Task.is_default)")
    return defaults[0]


def make_task(name: str, **kwargs) -> Task:
    """The task ``name`` with parameters ``kwargs``; ValueError naming what is wrong."""
    if name not in TASKS:
        raise ValueError(f"task = {name!r}; expected one of {sorted(TASKS)}")
    cls = TASKS[name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"task {name!r}: unknown arguments {unknown}; expected a subset of {sorted(known)}")
    return cls(**kwargs)


def absolute_task_args(name: str, args: dict) -> dict:
    """``args`` of the task ``name`` with every path argument absolute (``~`` expanded), as a run records
    them: where its data are, so that it evaluates and resumes from any folder."""
    paths = TASKS[name].path_arguments(args) if name in TASKS else []
    return {key: os.path.abspath(os.path.expanduser(value)) if key in paths else value for key, value in args.items()}


def recorded_task_args(name: str, args: dict, where) -> dict:
    """The task arguments a run recorded in ``where`` (a checkpoint), with absolute paths. Runs of older versions
    recorded paths as given, relative to a folder they did not record: such a path is taken from the working
    directory if it exists there, else a ValueError names it and how to fix it."""
    resolved = absolute_task_args(name, args)
    for key in TASKS[name].path_arguments(args) if name in TASKS else []:
        value = os.path.expanduser(args[key])
        if not os.path.isabs(value) and not os.path.exists(value):
            raise ValueError(
                f"{where}: the run's task argument {key} = {args[key]!r} is a relative path (recorded by an older "
                f"tra, relative to the folder the run was started in) and {resolved[key]} does not exist; expected "
                f"that path: run this command from the folder the run was started in, or write the absolute path "
                f"into task_args.{key} of {Path(where) / 'train_config.json'}"
            )
    return resolved
