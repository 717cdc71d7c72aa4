"""``tra data`` and ``tra train``: the flags of one training run, each config field's, each attention option's and each
task parameter's (the task's own, checked against ``--task``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path

from ..data import TASKS, absolute_task_args, check_scored, default_task, make_task
from ..layers import ATTENTION_KINDS
from ..models import ModelConfig
from ..models.config import LEGACY_TRA_KINDS, legacy_kind_error
from ..models.config import VERSION as ModelConfig_VERSION
from ..training.config import VERSION as TrainConfig_VERSION
from ..training.config import TrainConfig, check_seed
from ..utils.atomic import make_directory
from ..utils.cli_help import HelpFormatter
from ..utils.dataclass_io import current_fields
from ..utils.memory import check_memory
from ..utils.os_errors import writing
from .args import file_arg, finite_float, path_arg


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_flag(group, name: str, default, help_text: str, dest: str | None = None, finite: bool = True) -> None:
    """A flag that is None unless given: a switch pair for a bool, else a value of the default's type (a float
    finite unless ``finite`` is false)."""
    dest = {"dest": dest} if dest else {}
    if isinstance(default, bool):
        group.add_argument(_flag(name), action=argparse.BooleanOptionalAction, default=None, help=help_text, **dest)
    else:
        kind = parse_seed if name == "seed" else (value_type(default) if finite else type(default))
        group.add_argument(
            _flag(name), type=kind, default=None, metavar=type(default).__name__.upper(), help=help_text, **dest
        )


def option_flags() -> dict[str, tuple[str, str, dataclasses.Field, list[str]]]:
    """Every attention option as a flag: its qualified name (``{prefix}_{option}``) -> (prefix, option, field,
    the kinds that declare it), from the registered kinds' options classes."""
    flags: dict = {}
    for kind in ATTENTION_KINDS.values():
        for f in dataclasses.fields(kind.options):
            qualified = kind.options.qualified(f.name)
            flags.setdefault(qualified, (kind.options.prefix, f.name, f, []))[3].append(kind.name)
    return flags


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig and ModelConfig field (model fields by their own names), and one per attention
    option of the registered kinds (``--{prefix}-{option}``)."""
    for cls, title in ((TrainConfig, "training"), (ModelConfig, "model")):
        group = parser.add_argument_group(f"{title} (each flag overrides --config; unset flags keep its value)")
        for f in dataclasses.fields(cls):
            if f.name in ("model", "task", "task_args", "tokenizer", "attention_options"):  # task; options below
                continue
            shown = "the task's vocabulary size" if f.name == "vocab_size" else f.default
            _add_flag(group, f.name, f.default, f"{f.metadata.get('help', '')} (default: {shown})")
    group = parser.add_argument_group(
        "attention options (each belongs to the kinds named in its help; it overrides --config)"
    )
    for qualified, (_, _, f, kinds) in option_flags().items():
        help_text = f"{', '.join(kinds)}: {f.metadata.get('help', '')} (default: {f.default})"
        check = f.metadata.get("check")
        infinite = isinstance(f.default, float) and check is not None and check(float("-inf")) is None
        _add_flag(group, qualified, f.default, help_text, dest=f"option_{qualified}", finite=not infinite)


def task_flags() -> dict[str, tuple[dataclasses.Field, list[str]]]:
    """Every task parameter as a flag: its name -> (its field in the first task that declares it, every task that
    does), from the registered tasks."""
    flags: dict = {}
    for name, cls in TASKS.items():
        for f in dataclasses.fields(cls):
            flags.setdefault(f.name, (f, []))[1].append(name)
    return flags


def _add_task_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per task parameter (``tra data TASK --help`` describes each task's), None unless given: of its
    default's type, or of its declared type (text where a None default declares none); a name that tasks declare
    with different types is read as JSON or text, and the task checks it."""
    group = parser.add_argument_group("task parameters (each belongs to the tasks named in its help; --task picks)")
    for name, (f, tasks) in task_flags().items():
        types = {type(TASKS[t].__dataclass_fields__[name].default) for t in tasks}
        helps = {TASKS[t].__dataclass_fields__[name].metadata.get("help", "") for t in tasks}
        meaning = helps.pop() if len(helps) == 1 else "a parameter of each, its meaning in `tra data TASK --help`"
        help_text = f"{', '.join(tasks)}: {meaning}"
        if len(types) > 1 or f.default is None:
            kind = (f.metadata.get("type") or str) if len(types) == 1 else _json_or_text
            metavar = "VALUE" if kind is _json_or_text else kind.__name__.upper()
            if "default" not in help_text:
                help_text += " (default: none)" if len(types) == 1 else " (default: the task's)"
            group.add_argument(_flag(name), type=kind, default=None, dest=f"task_{name}", metavar=metavar,
                               help=help_text)  # fmt: skip
        else:
            defaults = {repr(TASKS[t].__dataclass_fields__[name].default) for t in tasks}
            shown = f.default if len(defaults) == 1 else "the task's"
            _add_flag(group, name, f.default, f"{help_text} (default: {shown})", dest=f"task_{name}")


def _json_or_text(text: str):
    """A value as JSON if it parses, else as text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _task_args(args, task: str) -> dict:
    """The task parameters given as flags, each of which must belong to ``task``."""
    given = {name: v for name in task_flags() if (v := getattr(args, f"task_{name}", None)) is not None}
    for name in given:
        tasks = task_flags()[name][1]
        if task not in tasks:
            raise ValueError(f"{_flag(name)} is a parameter of {', '.join(tasks)}; the task is {task!r} (its "
                             f"parameters: `tra data {task} --help`)")  # fmt: skip
    return given


def _attention_options(args, model: dict) -> dict:
    """The model's attention options: the config file's (unless --attention names another kind) updated by the
    option flags given, each of which must belong to the model's kind."""
    kind = ATTENTION_KINDS.get(model.get("attention", "tra"))
    given = {q: v for q in option_flags() if (v := getattr(args, f"option_{q}", None)) is not None}
    options = dict(model.get("attention_options") or {})
    if kind is None:
        return options  # ModelConfig names the unknown kind
    for qualified, value in given.items():
        prefix, name, _, kinds = option_flags()[qualified]
        if kind.name not in kinds:
            raise ValueError(
                f"{_flag(qualified)} is an option of {', '.join(kinds)}; the model's attention is {kind.name!r} "
                f"(its options: {', '.join(_flag(kind.options.qualified(n)) for n in kind.options.names()) or 'none'})"
            )
        options[name] = value
    return options


def value_type(default):
    """The argparse type of a field with this default: its type, a float only if finite."""
    return finite_float if isinstance(default, float) else type(default)


def parse_seed(text: str) -> int:
    """An argparse type: a seed in [0, 2**63), or an error that argparse prints after the flag's name."""
    try:
        return check_seed(int(text), "seed")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}; expected an integer seed in [0, 2**63)") from None


def _parse_task_arg(text: str) -> tuple[str, object]:
    """'rate=0.9' -> ('rate', 0.9): the value as JSON if it parses, else as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(
            f"--task-arg {text!r}; expected NAME=VALUE, e.g. rate=0.9 (see `tra data TASK --help`)"
        )
    return name, _json_or_text(value)


def _read_config_file(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"--config {path} does not exist or is not a file; expected a TrainConfig JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--config {path} is not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"--config {path} holds a JSON {type(data).__name__}; expected an object of TrainConfig fields"
        )
    return data


def config_from_args(args) -> TrainConfig:
    data = _read_config_file(args.config) if args.config else {}
    if args.config:  # a file of an earlier version: `tra upgrade` converts it
        data = current_fields("TrainConfig", data, TrainConfig_VERSION, f"--config {args.config}", True, args.config)
    model = data.pop("model", {})
    if not isinstance(model, dict):
        raise ValueError(f"ModelConfig: got {type(model).__name__} in --config; expected a JSON object of fields")
    if args.config:
        model = current_fields("ModelConfig", model, ModelConfig_VERSION, f"--config {args.config}", True, args.config)
    file_kind = model.get("attention", "tra")
    for f in dataclasses.fields(ModelConfig):
        if getattr(args, f.name, None) is not None:
            model[f.name] = getattr(args, f.name)
    flag_kind = getattr(args, "attention", None)
    if flag_kind in LEGACY_TRA_KINDS:  # --attention names kinds as they are now (its dict has no version)
        raise ValueError(legacy_kind_error(flag_kind))
    if model.get("attention", "tra") != file_kind:  # another kind: the file's kind's options do not apply
        model.pop("attention_options", None)
    model["attention_options"] = _attention_options(args, model)
    for f in dataclasses.fields(TrainConfig):
        if f.name not in ("model", "task_args") and getattr(args, f.name, None) is not None:
            data[f.name] = getattr(args, f.name)
    data.setdefault("task", default_task())
    flags = _task_args(args, data["task"])
    if args.task_arg or flags:
        data["task_args"] = {**data.get("task_args", {}), **dict(args.task_arg or []), **flags}
    if isinstance(data.get("task_args"), dict):  # the run records where its data are, whatever its folder
        data["task_args"] = absolute_task_args(data["task"], data["task_args"])
    task = make_task(data["task"], **data.get("task_args", {}))
    model.setdefault("vocab_size", task.vocab_size)
    model.setdefault("tokenizer", task.tokenizer_description())
    return TrainConfig.from_dict({**data, "model": model}, partial=True)


def check_output_file(path: Path, flag: str) -> Path:
    """Before any work: the folder of ``path`` (a file, not a folder: ``args.file_arg``) is created if missing."""
    make_directory(path.parent, f"{flag} {path}: folder")
    return path


def cmd_data(args) -> None:
    if args.num <= 0:
        raise ValueError(f"--num = {args.num}; expected a positive number of sequences")
    task_cls = TASKS[args.task]
    task = make_task(args.task, **{f.name: getattr(args, f.name) for f in dataclasses.fields(task_cls)})
    task.check_length(args.length)
    check_memory(
        args.num * args.length * task.memory_per_token,
        f"tra data {args.task}: {args.num} sequences (--num) of {args.length} tokens (--length)",
        "fewer sequences or shorter ones (or several files, with different --seed)",
    )
    check_output_file(args.out, "--out")
    batch = check_scored(task.sample(args.num, args.length, args.seed), f"tra data {args.task}")
    with writing("sequences", args.out):
        task.write_text(args.out, batch)
    print(json.dumps({"out": str(args.out), **task.statistics(batch)}))


def cmd_train(args) -> None:
    from ..training import train

    config = config_from_args(args)
    if config.warmup_steps > config.steps:
        raise ValueError(f"--warmup-steps = {config.warmup_steps}; expected at most --steps = {config.steps} (the "
                         "learning rate would never reach its peak)")  # fmt: skip
    checkpoint = train(config, args.out, resume=args.resume, progress=not args.no_progress, fsdp=args.fsdp)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for all
        print(f"trained {config.model.attention}: {checkpoint}")


def add_data_command(sub) -> None:
    data = sub.add_parser("data", help="write generated task sequences to a text file")
    data_sub = data.add_subparsers(dest="task", required=True, metavar="TASK")
    for name, cls in TASKS.items():
        if not cls.has_text_format:
            continue
        p = data_sub.add_parser(name, help=(cls.__doc__ or name).strip().splitlines()[0], formatter_class=HelpFormatter)
        for f in dataclasses.fields(cls):
            if isinstance(f.default, bool):
                p.add_argument(
                    _flag(f.name), action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata.get("help")
                )
            else:
                kind = f.metadata.get("type") or value_type(f.default)  # a field that defaults to None names its type
                p.add_argument(_flag(f.name), type=kind, default=f.default, help=f.metadata.get("help"))
        p.add_argument("--length", type=int, default=512, help="tokens per sequence")
        p.add_argument("--num", type=int, default=1000, help="number of sequences")
        p.add_argument("--seed", type=parse_seed, default=0, help="the same seed gives the same sequences")
        p.add_argument(
            "--out", type=file_arg, required=True, help="text file to write, one sequence per line (required)"
        )
        p.set_defaults(func=cmd_data)


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of one training run (all but ``--task``): output, config file, resume, config fields, attention
    options and task parameters."""
    parser.add_argument("--out", type=path_arg, required=True, help="run directory (required)")
    parser.add_argument(
        "--config", type=file_arg, help="a TrainConfig JSON, e.g. a run's train_config.json (default: none)"
    )
    parser.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--fsdp",
        action="store_true",
        help="under torchrun: shard parameters, gradients and optimizer state with FSDP2 instead of DDP",
    )
    parser.add_argument(
        "--task-arg",
        type=_parse_task_arg,
        action="append",
        metavar="NAME=VALUE",
        help="a task parameter, repeatable, as JSON or text, as its flag below gives it (default: the task's defaults)",
    )
    _add_config_flags(parser)
    _add_task_flags(parser)


def add_train_command(sub) -> None:
    tr = sub.add_parser("train", help="train one model (flags override --config)", formatter_class=HelpFormatter)
    tr.add_argument("--task", choices=sorted(TASKS), help=f"task to train on (default: {default_task()})")
    add_train_flags(tr)
    tr.set_defaults(func=cmd_train)
