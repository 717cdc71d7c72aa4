"""A question as data: what a results folder's ``spec.py`` declares, and how ``tra run`` loads it.

A spec is a short Python file that sets ``spec`` to one of:

- ``Question``: methods compared on one task (or several: one section each) under one protocol: the task's
  preset, seeds, a learning-rate grid (each method keeps the rate with the best validation value, chosen on
  ``sweep_seeds``), and any change of the preset's budget;
- ``Scorecard``: methods checked against a baseline on several bars, each bar reading another question's rows
  (``Bar("fits", "hierarchy")``): the store supplies that question's runs, nothing is copied;
- ``Overview``: one figure per method and question, read from other questions' rows (``Column``);
- ``Inspection``: what the TRA models of another question's runs keep, per layer and head.

A spec that needs another question's runs names that question; a user who adds a kind of their own adds one
``Method`` line to a copy of a spec.
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..training.config import check_seed, task_args_check
from ..utils.checks import boolean, check_declared, is_int, is_number, non_negative, one_of, option, positive_int
from .methods import Method
from .spec_file import run_spec_file

STATUSES = ("current", "pilot", "archived")
FIGURES = ("longest", "fitted", "first")
BARS = ("text", "exact", "longest", "fits")
SPEC_NAME = "spec.py"
_LOADING: contextvars.ContextVar[Path | None] = contextvars.ContextVar("loading", default=None)
_LOADED: dict[Path, object] = {}


def _positive_rates(rates, what: str) -> tuple[float, ...]:
    rates = tuple(rates)
    if not all(is_number(r) and math.isfinite(r) and r > 0 for r in rates):
        raise ValueError(f"{what} = {rates!r}; expected finite positive learning rates")
    if len(set(rates)) != len(rates):
        raise ValueError(f"{what} = {rates!r}; expected each rate once")
    return tuple(float(r) for r in rates)


def _distinct_methods(methods, what: str) -> tuple[Method, ...]:
    methods = tuple(methods)
    if not methods or not all(isinstance(m, Method) for m in methods):
        raise ValueError(f"{what}: expected one or more Method(...), got {methods!r}")
    for attribute in ("label", "signature"):
        values = [getattr(m, attribute) for m in methods]
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"{what}: methods with the same {attribute} {repeated}; expected each method once")
    return methods


def _title(value) -> str | None:
    return None if isinstance(value, str) and value.strip() else "the question the page answers"


def _steps(value) -> str | None:
    return None if value is None or (is_int(value) and value >= 1) else "a positive number of steps"


def _fit_accuracy(value) -> str | None:
    ok = value is None or (is_number(value) and 0 <= value <= 1)
    return None if ok else "a number in [0, 1] (0: train every step)"


@dataclass(frozen=True)
class Question:
    """Methods on ``task`` (an experiment: ``majority``, ``hierarchy``, ``lm``...; a tuple for several) under the
    ``preset``, for ``seeds``. ``lrs``: the learning-rate grid of every method without one of its own (empty:
    the preset's validated rate); with two or more rates the runs of ``sweep_seeds`` (default: every seed)
    choose each method's rate and the other seeds train at it. ``steps`` and ``fit_accuracy`` change the
    preset's budget, ``task_args`` its task parameters. ``lrs_source``: where a grid of one rate comes from.
    ``status``: current, a pilot (a narrow question a current page cites), or archived (superseded).
    ``extend_grid``: a rate chosen at an edge of its grid adds the next rate beyond it (``selection.extension``).
    ``match_parameters``: a method every other one is matched to in parameters, through its MLP width."""

    title: str = option(help="the question the page answers", check=_title)
    task: str | tuple[str, ...] = option(help="a task name, or distinct task names (a section each)")
    methods: tuple[Method, ...] = option(help="the methods compared, each once")
    seeds: tuple[int, ...] = option(help="one or more distinct seeds")
    lrs: tuple[float, ...] = option((), "the learning-rate grid of every method without one of its own")
    sweep_seeds: tuple[int, ...] = option((), "the seeds whose runs choose each method's rate (default: every seed)")
    preset: str = option("cpu", "the task's preset")
    steps: int | None = option(None, "a step budget instead of the preset's", _steps)
    fit_accuracy: float | None = option(None, "a fit accuracy instead of the preset's", _fit_accuracy)
    task_args: dict = option(
        help="task parameters instead of the preset's", check=task_args_check, default_factory=dict
    )
    lrs_source: str = option("", "where a grid of one rate comes from")
    status: str = option(
        "current", "current, pilot (a narrow question a current page cites) or archived", one_of(*STATUSES)
    )
    extend_grid: bool = option(
        False,
        "a method whose rate is chosen at an edge of its grid, without fitting, sweeps the next rate beyond it "
        "(1e-3, 3e-3, 1e-2, ...; at most 3 a side) until the chosen rate is inside its grid",
        boolean,
    )
    match_parameters: Method | None = option(
        None,
        "a method of the question whose parameter count every other one is matched to, within 2%, through its MLP "
        "width (ModelConfig.mlp_ratio; a method that sets mlp_ratio keeps it); None: each model as it is built",
    )

    def __post_init__(self):
        check_declared(self)
        tasks = (self.task,) if isinstance(self.task, str) else tuple(self.task)
        if not tasks or len(set(tasks)) != len(tasks) or not all(isinstance(t, str) for t in tasks):
            raise ValueError(f"Question.task = {self.task!r}; expected a task name or distinct task names")
        object.__setattr__(self, "methods", _distinct_methods(self.methods, "Question.methods"))
        seeds = tuple(check_seed(s, "Question.seeds") for s in self.seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"Question.seeds = {self.seeds!r}; expected one or more distinct seeds")
        object.__setattr__(self, "seeds", seeds)
        object.__setattr__(self, "lrs", _positive_rates(self.lrs, "Question.lrs"))
        sweep = tuple(self.sweep_seeds)
        if not set(sweep) <= set(seeds) or len(set(sweep)) != len(sweep):
            raise ValueError(f"Question.sweep_seeds = {self.sweep_seeds!r}; expected distinct seeds of {seeds}")
        if sweep and not any(len(self.grid(m)) > 1 for m in self.methods):
            raise ValueError("Question.sweep_seeds: no method has a grid of two or more rates to sweep")
        object.__setattr__(self, "sweep_seeds", sweep)
        if self.extend_grid and not any(len(self.grid(m)) > 1 for m in self.methods):
            raise ValueError("Question.extend_grid: no method has a grid of two or more rates to extend")
        if self.match_parameters is not None and self.match_parameters not in self.methods:
            raise ValueError(
                f"Question.match_parameters = {self.match_parameters!r}; expected one of the question's methods"
            )
        if any(len(self.grid(m)) == 1 for m in self.methods) and not self.lrs_source:
            raise ValueError("Question.lrs_source: a method trains at one given rate; expected where it comes from")

    @property
    def tasks(self) -> tuple[str, ...]:
        return (self.task,) if isinstance(self.task, str) else tuple(self.task)

    def grid(self, method: Method) -> tuple[float, ...]:
        """The rates ``method`` trains at: its own grid, else the question's (empty: the preset's validated one)."""
        return method.lrs or self.lrs

    def sweeping(self) -> tuple[int, ...]:
        """The seeds a grid of several rates runs on."""
        return self.sweep_seeds or self.seeds


@dataclass(frozen=True)
class Bar:
    """One column of a scorecard: ``kind`` (text: bits per byte within ``tolerance`` of the baseline at 1x and
    ``long_tolerance`` at the longest length; exact: every test split exact in every seed; longest: exact at the
    longest length in every seed; fits: fitted in as many seeds as the baseline) on ``task``, read from the
    questions ``names`` (sibling folders, ``load_question``): each method from the first of them that runs it,
    under that question's protocol. The questions must share the task, preset, budget and seeds."""

    kind: str = option(help="what passes: text, exact, longest or fits", check=one_of(*BARS))
    names: str | tuple[str, ...] = option(help="the question folders it reads, the first that runs a method first")
    task: str | None = option(None, "the task of the questions (default: the first's only task)")
    tolerance: float = option(0.005, "text: bits per byte above the baseline's at 1x that still pass", non_negative)
    long_tolerance: float = option(0.0, "text: the same at the longest length", non_negative)
    questions: tuple[Question, ...] = field(init=False)

    def __post_init__(self):
        check_declared(self)
        names = (self.names,) if isinstance(self.names, str) else tuple(self.names)
        if not names:
            raise ValueError("Bar.names: expected one or more question folders")
        object.__setattr__(self, "names", names)
        questions = tuple(load_question(name) for name in names)
        task = self.task or questions[0].tasks[0]
        for name, question in zip(names, questions):
            if task not in question.tasks or (self.task is None and len(question.tasks) > 1):
                raise ValueError(f"Bar({self.kind!r}, {name!r}): tasks {question.tasks}; expected task= one of them")
            protocol = (question.preset, question.steps, question.fit_accuracy, question.seeds, question.task_args)
            first = questions[0]
            if protocol != (first.preset, first.steps, first.fit_accuracy, first.seeds, first.task_args):
                raise ValueError(f"Bar({self.kind!r}, {names}): {name} has another preset, budget or seeds than "
                                 f"{names[0]}; expected questions of one protocol")  # fmt: skip
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "questions", questions)

    @property
    def name(self) -> str:
        """How the scorecard's columns name the bar: its question, or the task when it reads several."""
        return self.names[0] if len(self.names) == 1 else self.task


def row_label(method: Method | str) -> str:
    """The label a scorecard row shows: a method's, or the label given."""
    return method.label if isinstance(method, Method) else method


@dataclass(frozen=True)
class Scorecard:
    """Does one of ``candidates`` meet every bar at once, against ``baseline``? Each is a Method (found in a bar's
    question by what it trains) or a label (found by label: one row for methods that differ per task, such as
    randomized positions whose range follows each task's longest test); a bar whose question lacks it shows n/a."""

    title: str
    baseline: Method | str
    candidates: tuple[Method | str, ...]
    bars: tuple[Bar, ...]
    status: str = option("current", "current, pilot or archived", one_of(*STATUSES))

    def __post_init__(self):
        check_declared(self)
        rows = (self.baseline, *self.candidates)
        if not all(isinstance(m, (Method, str)) for m in rows):
            raise ValueError(f"Scorecard: the baseline and candidates = {rows!r}; expected Methods or labels")
        labels = [row_label(m) for m in rows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"Scorecard: the baseline and candidates {labels}; expected each once")
        object.__setattr__(self, "candidates", tuple(self.candidates))
        if not self.bars or not all(isinstance(b, Bar) for b in self.bars):
            raise ValueError(f"Scorecard.bars = {self.bars!r}; expected one or more Bar(...)")
        object.__setattr__(self, "bars", tuple(self.bars))

    @property
    def rows(self) -> tuple[Method | str, ...]:
        return (self.baseline, *self.candidates)


@dataclass(frozen=True)
class Column:
    """``figure`` on ``task`` of the questions ``names`` (sibling folders; each method from the first that runs
    it, as a scorecard's bar reads them): ``longest`` (full-sequence accuracy, or bits per byte for text, at the
    longest test length: the task's first split there, averaged over depths where a task tests several),
    ``first`` (the same at the training length) or ``fitted`` (seeds fitted of those trained)."""

    names: str | tuple[str, ...] = option(help="the question folders it reads, as a bar's")
    figure: str = option(help="longest, fitted or first", check=one_of(*FIGURES))
    title: str = option(help="the column's heading")
    task: str | None = option(None, "the task of the questions (default: the first's only task)")
    bar: Bar = field(init=False)

    def __post_init__(self):
        check_declared(self)
        bar = Bar("fits", self.names, task=self.task)  # the same reading of one or more questions
        object.__setattr__(self, "bar", bar)
        object.__setattr__(self, "names", bar.names)
        object.__setattr__(self, "task", bar.task)


@dataclass(frozen=True)
class Overview:
    """One table of ``rows`` (Methods or labels) by ``columns``, with a legend saying what each column shows."""

    title: str
    rows: tuple[Method | str, ...]
    columns: tuple[Column, ...]
    status: str = option("current", "current, pilot or archived", one_of(*STATUSES))

    def __post_init__(self):
        check_declared(self)
        labels = [row_label(r) for r in self.rows]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"Overview.rows: {labels}; expected one or more rows, each once")
        if not self.columns or not all(isinstance(c, Column) for c in self.columns):
            raise ValueError(f"Overview.columns = {self.columns!r}; expected one or more Column(...)")


@dataclass(frozen=True)
class Inspection:
    """What trained TRA models keep (``tra inspect``'s statistics per layer and head): ``method``'s runs of the
    question ``name`` at the rate it selects, one per seed of ``seeds`` (labelled ``labels``), at ``lengths``
    times the training length on ``sequences`` fresh test sequences each."""

    title: str
    name: str
    method: Method | str
    seeds: tuple[int, ...]
    labels: tuple[str, ...]
    lengths: tuple[int, ...] = (1, 2, 8)
    sequences: int = option(64, "fresh test sequences per length", positive_int)
    status: str = option("current", "current, pilot or archived", one_of(*STATUSES))
    question: Question = field(init=False)

    def __post_init__(self):
        check_declared(self)
        question = load_question(self.name)
        if len(question.tasks) != 1:
            raise ValueError(f"Inspection({self.name!r}): expected a question of one task")
        if not set(self.seeds) <= set(question.seeds):
            raise ValueError(f"Inspection.seeds = {self.seeds!r}; expected seeds of {self.name}: {question.seeds}")
        if len(self.labels) != len(self.seeds) or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"Inspection.labels = {self.labels!r}; expected one distinct label per seed")
        object.__setattr__(self, "question", question)


def spec_path(path: str | Path) -> Path:
    """``path`` itself if it is a file, else ``path/spec.py``; a ValueError if neither exists."""
    path = Path(path)
    found = path / SPEC_NAME if path.is_dir() else path
    if not found.is_file():
        raise ValueError(f"{path}: no {SPEC_NAME}; expected a spec file or a question folder holding one")
    return found.resolve()


def load_spec(path: str | Path):
    """The ``spec`` a spec file (or a folder's ``spec.py``) sets, run once per process and path."""
    path = spec_path(path)
    if path in _LOADED:
        return _LOADED[path]
    token = _LOADING.set(path.parent)
    try:
        namespace = run_spec_file(path)
    finally:
        _LOADING.reset(token)
    spec = namespace.get("spec")
    if not isinstance(spec, (Question, Scorecard, Overview, Inspection)):
        raise ValueError(f"{path}: spec = {spec!r}; expected the file to set spec = Question(...), Scorecard(...), "
                         "Overview(...) or Inspection(...)")  # fmt: skip
    _LOADED[path] = spec
    return spec


def load_question(name: str) -> Question:
    """The Question of a sibling folder (``load_question("hierarchy")`` in ``results/scorecard_rivals/spec.py``
    reads ``results/hierarchy/spec.py``), for a spec that reads another question's runs."""
    here = _LOADING.get()
    base = here.parent if here is not None else Path.cwd()
    spec = load_spec(base / name)
    if not isinstance(spec, Question):
        raise ValueError(f"load_question({name!r}): {spec_path(base / name)} is not a Question")
    return spec
