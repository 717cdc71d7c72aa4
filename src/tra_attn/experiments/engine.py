"""The engine: the runs a question needs, each obtained once, and the rows its page is built from.

A question's runs are (method, learning rate, seed) under its task's preset. A method with a grid of several
rates first runs every rate on the sweep seeds; it keeps the rate with the best mean validation value (the
experiment's selection metric; the test splits play no part) and its other seeds run at that rate only. A
method without a grid runs at its preset's validated rate.

Every run is identified by its config (``identity.run_id``) and obtained from the first place that has it:
the evidence (committed records), the store (a finished run is evaluated, an interrupted one resumed), or
training it in the store. A run whose training diverges (``TrainingDiverged``) is recorded as such: its
validation selection metric is NaN (its rate ranks last) and its ``diverged`` row holds the step; such a
record is final.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..data import make_task
from ..models import ModelConfig
from ..training import TrainConfig, train
from ..training.checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint
from ..training.divergence import TrainingDiverged
from ..utils.atomic import make_directory
from ..utils.provenance import git_commit
from .experiment import Experiment
from .identity import run_id
from .methods import Method
from .parameters import matched_mlp, model_parameters
from .preset import Preset
from .registry import experiment as experiment_of
from .run_lock import run_lock
from .spec import Question
from .store import DIVERGED, RECORD_NAME, Evidence, Record, RunStore, lean


def model_config(experiment: Experiment, question: Question, method: Method) -> ModelConfig:
    """The model of ``method``'s runs as the preset and the method build it (before any matching of parameters)."""
    preset = experiment.presets[question.preset]
    task = make_task(experiment.task, **{**preset.task_args, **question.task_args})
    return ModelConfig(
        vocab_size=task.vocab_size,
        tokenizer=task.tokenizer_description(),
        attention=method.kind,
        attention_options={**preset.options.get(method.kind, {}), **method.options},
        **{**preset.model, **method.model},
    )


def run_config(
    experiment: Experiment, question: Question, method: Method, lr: float, seed: int, device: str = "cpu"
) -> TrainConfig:
    """The TrainConfig of one run: the preset's model, task and recipe, the method's changes, the question's
    budget; with ``Question.match_parameters``, an MLP width that matches the reference method's parameters."""
    preset = experiment.presets[question.preset]
    task_args = {**preset.task_args, **question.task_args}
    model = model_config(experiment, question, method)
    reference = question.match_parameters
    if reference is not None and method != reference and "mlp_ratio" not in method.model:
        target = model_parameters(model_config(experiment, question, reference))
        model = matched_mlp(model, target, f"{method.label}, matched to {reference.label} (Question.match_parameters)")
    train_args = {**preset.train, **method.train}
    if question.steps is not None:
        train_args["steps"] = question.steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], question.steps)
    if question.fit_accuracy is not None:
        train_args["fit_accuracy"] = question.fit_accuracy
    return TrainConfig(
        task=experiment.task, task_args=task_args, model=model, lr=lr, seed=seed, device=device, **train_args
    )


@dataclass(frozen=True)
class Run:
    """One run a question needs: its method, rate and seed, its config and which evaluation its page reads."""

    experiment: Experiment
    preset: Preset
    method: Method
    config: TrainConfig

    @functools.cached_property
    def id(self) -> str:
        return run_id(self.config)

    @property
    def evaluation(self) -> str:
        return self.experiment.evaluation(self.preset)

    def describe(self) -> str:
        return f"{self.method.label} lr={self.config.lr:g} seed={self.config.seed}"

    def rows(self, record: Record) -> list[dict]:
        """The record's rows for this evaluation, with who trained them: task, method (its label), seed, rate,
        config, commit and the run's id."""
        context = {"task": self.experiment.task, "method": self.method.label, "seed": self.config.seed}
        context |= {"lr": self.config.lr, "config": record.config, "run": record.run}
        validation = [{**r, **context, "commit": record.commit} for r in record.validation]
        if record.diverged:
            return validation
        tests = record.tests[self.evaluation]
        return validation + [{**r, **context, "commit": tests["commit"]} for r in tests["rows"]]


class Missing(ValueError):
    """Runs that neither the evidence nor the store holds, when training is off."""

    def __init__(self, runs: list[Run], more: bool):
        self.runs = runs
        listed = "; ".join(f"{r.describe()} ({r.id})" for r in runs[:12])
        rest = f" and {len(runs) - 12} more" if len(runs) > 12 else ""
        after = " (then the seeds that train at each swept method's selected rate)" if more else ""
        super().__init__(f"{len(runs)} run(s) are in neither the evidence nor the store: {listed}{rest}{after}; "
                         "expected them trained (run without --no-train)")  # fmt: skip


class Source:
    """Supplies the record of a run: from the evidence, else the store, else by training it in the store (unless
    ``train`` is off: then the run is noted as missing and None returned)."""

    def __init__(self, evidence: Evidence, store: RunStore, train: bool = True, progress: bool = True, log=print):
        self.evidence, self.store, self.train, self.progress, self.log = evidence, store, train, progress, log
        self.missing: list[Run] = []
        self.checkpoints_missing: set[str] = set()  # the missing runs needed as checkpoints, not rows alone
        self.retrained: dict[str, tuple[Run, list[dict]]] = {}  # the runs seen that were trained more than once
        self.seen: set[str] = set()

    def record(self, run: Run) -> Record | None:
        self.seen.add(run.id)
        record = self._record(run)
        if record is not None and record.retrained:
            self.retrained[run.id] = (run, record.retrained)
        return record

    def checkpoint(self, run: Run) -> tuple[Path, str] | None:
        """(the latest checkpoint of ``run`` in the store, the commit that trained it), training the run in the
        store first if it has none (None with training off: the run is noted as missing)."""
        directory = self.store.directory(run.id)
        stored = self.store.get(run.id)
        if stored is None or latest_checkpoint(directory) is None:
            if not self.train:
                self.missing.append(run)
                self.checkpoints_missing.add(run.id)
                return None
            if latest_checkpoint(directory) is None:  # a record whose checkpoints were removed: train again
                (directory / RECORD_NAME).unlink(missing_ok=True)
            stored = self._obtain(run, None)
        return latest_checkpoint(directory), stored.commit

    def _record(self, run: Run) -> Record | None:
        held = self.evidence.get(run.id)
        if held is not None and held.covers(run.evaluation):
            return held
        stored = self.store.get(run.id)
        if stored is not None and stored.covers(run.evaluation):
            record = stored.merged(held)
            self.evidence.put(record)
            return record
        if not self.train:
            self.missing.append(run)
            return None
        record = self._obtain(run, held or stored).merged(held)
        self.evidence.put(record)
        return record

    def _obtain(self, run: Run, known: Record | None) -> Record:
        """Train (or resume) the run in the store if it has not finished, then evaluate it; under a lock, so two
        processes asking for one run train it once."""
        directory = make_directory(self.store.directory(run.id), "--store")

        def waiting(holder: str) -> None:
            self.log(f"{run.describe()}: another process ({holder}) is training {directory}; waiting", flush=True)

        with run_lock(directory, waiting):
            stored = self.store.get(run.id)
            if stored is not None and stored.covers(run.evaluation):
                return stored
            config = self._config(run, directory)
            self.log(f"{run.describe()} -> {directory}", flush=True)
            try:
                train(config, directory, resume=latest_checkpoint(directory) is not None, progress=self.progress)
            except TrainingDiverged as err:
                self.log(f"{directory}: {err}; recorded as diverged", flush=True)
                metrics = [{"split": "validation", "length": config.length, "metric": m, "value": v}
                           for m, v in ((run.experiment.selection_metric, math.nan), (DIVERGED, err.step))]  # fmt: skip
                record = Record(run.id, config.to_dict(), git_commit(), metrics)
            else:
                tests = lean_rows(run.experiment.evaluate(config, directory, run.preset.eval_budget))
                validation = lean_rows(run.experiment.validation(config, directory))
                evaluated = {run.evaluation: {"commit": git_commit(), "rows": tests}}
                record = Record(run.id, config.to_dict(), git_commit(), validation, evaluated)
            record = record.merged(stored)
            self.store.put(record)
            if known is not None and not record.diverged:
                check_reproduced(known, record)
                record = Record(run.id, known.config, known.commit, known.validation, record.tests, known.retrained)
            return record

    @staticmethod
    def _config(run: Run, directory: Path) -> TrainConfig:
        """The run's config, or the one the store's folder was started with (the same identity; it may log or
        checkpoint at other intervals, which a resume must keep)."""
        saved = directory / TRAIN_CONFIG_NAME
        if not saved.is_file():
            return run.config
        config = TrainConfig.from_dict(json.loads(saved.read_text()), where=saved)
        if run_id(config) != run.id:
            raise ValueError(f"{directory} holds a run of another config; expected run {run.id} (remove the folder)")
        return config


def check_reproduced(known: Record, trained: Record) -> None:
    """A ValueError unless a run trained again in the store reproduces the validation of the record it completes
    (its new evaluation would otherwise describe another model than the record's rows)."""
    timing = {"train_seconds", "tokens_per_second"}
    before = {(r["metric"], r["length"]): r["value"] for r in known.validation if r["metric"] not in timing}
    after = {(r["metric"], r["length"]): r["value"] for r in trained.validation if r["metric"] not in timing}
    differ = sorted(key for key in before if before[key] != after.get(key))
    if differ:
        metric, length = differ[0]
        raise ValueError(
            f"run {known.run}: trained again at commit {trained.commit}, its validation {metric} at {length} is "
            f"{after.get((metric, length))!r}, not its record's {before[(metric, length)]!r} (commit {known.commit}): "
            "this code computes another model for the configuration, so its record cannot gain the evaluation; "
            "expected a question asking for the record's evaluations, or a new field for what changed"
        )


def lean_rows(rows: list[dict]) -> list[dict]:
    return [lean(r) for r in rows]


@dataclass
class Results:
    """The rows of one task of a question: ``rows`` at each method's rate (every seed), ``sweep`` (every rate of
    the methods with a grid, on the sweep seeds), each method's ``selected`` rate and ``grids`` (empty: the
    preset's rate), by label; ``needed``: how many runs each method needs, and ``lacking``: how many of them
    neither the evidence nor the store holds (training off), for the methods that lack any."""

    question: Question
    experiment: Experiment
    rows: list[dict] = field(default_factory=list)
    sweep: list[dict] = field(default_factory=list)
    selected: dict[str, float] = field(default_factory=dict)
    grids: dict[str, tuple[float, ...]] = field(default_factory=dict)
    needed: dict[str, int] = field(default_factory=dict)
    lacking: dict[str, int] = field(default_factory=dict)

    @property
    def preset(self) -> Preset:
        return self.experiment.presets[self.question.preset]

    def whole(self) -> Results:
        """These results with the methods that lack no run alone: a partial page shows a method once it is
        complete, never a mean over part of its seeds or a rate chosen from part of its grid."""
        kept = [r for r in self.rows if r["method"] not in self.lacking]
        sweep = [r for r in self.sweep if r["method"] not in self.lacking]
        selected = {label: lr for label, lr in self.selected.items() if label not in self.lacking}
        return replace(self, rows=kept, sweep=sweep, selected=selected)

    @property
    def methods(self) -> tuple[Method, ...]:
        """The question's methods that have rows, in its order."""
        found = {r["method"] for r in self.rows}
        return tuple(m for m in self.question.methods if m.label in found)


def check_question(question: Question) -> None:
    """Every task has an experiment with the preset, and every method a rate: before any work."""
    for task in question.tasks:
        experiment = experiment_of(task, "Question.task")
        if question.preset not in experiment.presets:
            raise ValueError(f"Question.preset = {question.preset!r}; expected one of {sorted(experiment.presets)} "
                             f"for {task}")  # fmt: skip
        preset = experiment.presets[question.preset]
        if question.fit_accuracy and experiment.fit_accuracy is None:
            raise ValueError(f"Question.fit_accuracy = {question.fit_accuracy}: {task} runs cannot train to fit")
        for method in question.methods:
            if not question.grid(method):
                preset.rate_for(method, question.preset)
            config = run_config(experiment, question, method, (question.grid(method) or (1e-3,))[0], question.seeds[0])
            check_evaluation_positions(method, config)


def check_evaluation_positions(method: Method, config: TrainConfig) -> None:
    """A method that draws evaluation positions (``random_positions_at_eval``) needs a range as long as the
    longest test split, which would otherwise be refused after every run had trained."""
    options = config.model.attention_options
    if not getattr(options, "random_positions_at_eval", False):
        return
    splits = config.task_instance().eval_splits(config.length, 1)
    longest = max(split.length or split.batch.tokens.shape[1] for split in splits)
    if options.random_positions < longest:
        raise ValueError(
            f"method {method.label}: random_positions = {options.random_positions} with random_positions_at_eval, "
            f"but the {config.task} test splits reach {longest} tokens; expected random_positions >= {longest}"
        )


def gather(question: Question, task: str, source: Source, device: str = "cpu") -> Results:
    """The rows of ``task`` for ``question``: every method's sweep (if it has a grid), then its seeds at the rate
    it selected; the runs come from ``source``."""
    experiment = experiment_of(task, "Question.task")
    preset = experiment.presets[question.preset]
    results = Results(question, experiment)

    def rows_of(method: Method, lr: float, seed: int) -> list[dict]:
        run = Run(experiment, preset, method, run_config(experiment, question, method, lr, seed, device))
        record = source.record(run)
        return [] if record is None else run.rows(record)

    for method in question.methods:
        results.grids[method.label] = question.grid(method)
    lacking = dict.fromkeys(results.grids, 0)  # per method, its runs the evidence and the store do not hold

    def counted(label: str, rows) -> list[dict]:
        """``rows`` (a generator of runs' rows) read, and the runs among them that lack counted for ``label``."""
        before = len(source.missing)
        rows = list(rows)
        lacking[label] += len(source.missing) - before
        return rows

    for method in question.methods:
        grid = results.grids[method.label]
        if len(grid) > 1:
            sweep = (r for lr in grid for s in question.sweeping() for r in rows_of(method, lr, s))
            swept = counted(method.label, sweep)
            added = [0, 0]  # rates added below and above the grid
            while question.extend_grid and not lacking[method.label]:
                rate = experiment.next_rate(swept, grid, tuple(added))
                if rate is None:
                    break
                added[rate > max(grid)] += 1
                grid = tuple(sorted((*grid, rate)))
                swept += counted(method.label, (r for s in question.sweeping() for r in rows_of(method, rate, s)))
            results.grids[method.label] = grid
            results.sweep += swept
    swept_whole = [r for r in results.sweep if not lacking[r["method"]]]  # no rate is chosen from part of a grid
    chosen = experiment.select_lrs(swept_whole)
    for method in question.methods:
        grid = results.grids[method.label]
        swept = set(question.sweeping()) if len(grid) > 1 else set()
        results.needed[method.label] = len(grid) * len(swept) + len(set(question.seeds) - swept)
        rate = grid[0] if len(grid) == 1 else preset.rate_for(method, question.preset) if not grid else None
        rate = chosen.get(method.label) if rate is None else rate
        if rate is None:  # its sweep lacks runs (training off): its other seeds wait for the rate
            lacking[method.label] += len(set(question.seeds) - swept)
            continue
        results.selected[method.label] = rate
        kept = [r for r in results.sweep if r["method"] == method.label and r["lr"] == rate]
        seeds = (r for s in question.seeds if s not in swept for r in rows_of(method, rate, s))
        results.rows += kept + counted(method.label, seeds)
    results.lacking = {label: count for label, count in lacking.items() if count}
    return results
