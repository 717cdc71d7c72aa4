"""``tra compare`` (any registered experiment, or the suite), its aliases (``tra bench``, and the command an
experiment names for itself: ``Experiment.command``), and ``tra report`` (the page of any results folder)."""

from __future__ import annotations

import argparse
import functools
import shlex
from pathlib import Path

from ..experiments.engine import run_comparison
from ..experiments.methods import METHODS, family_patterns, resolve_method
from ..experiments.pool import pool
from ..experiments.registry import experiments
from ..experiments.scorecard import scorecard, scorecard_page
from ..experiments.suite import run_suite, suite_tasks
from ..utils.atomic import atomic_write_text
from ..utils.cli_help import HelpFormatter
from ..utils.rows import read_rows
from .args import finite_float, registered
from .train import parse_seed

RESUMABLE = "Resumable: finished runs are skipped, unfinished ones continue."


def method_name(text: str) -> str:
    """An argparse type: a method (a row of the table, a registered kind or a member of a family), else an
    error listing the names and families."""
    try:
        resolve_method(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"unknown method {text!r}; {str(err).split('; ', 1)[1]}") from None
    return text


def _is_method(text: str) -> bool:
    """Whether ``text`` names a method (for tests that generate names no method has)."""
    try:
        method_name(text)
    except argparse.ArgumentTypeError:
        return False
    return True


method_name.accepts = _is_method


def add_comparison_flags(parser: argparse.ArgumentParser, presets: str, methods: str, lrs: str, out: str) -> None:
    """The flags every comparison takes: preset, methods, seeds, steps, a learning-rate sweep (and the seeds
    it runs on), output, device. ``presets``, ``methods``, ``lrs`` and ``out`` describe the defaults."""
    parser.add_argument("--preset", default="cpu", help=f"model and recipe: {presets.replace('%', '%%')}")
    parser.add_argument(
        "--methods",
        nargs="+",
        type=method_name,
        help="attention kinds, named variants ("
        + ", ".join(m for m, row in METHODS.items() if row.is_variant)
        + ") or members of a family ("
        + ", ".join(family_patterns())
        + f": see experiments/methods.py) to run (default: {methods})",
    )
    parser.add_argument("--seeds", type=parse_seed, nargs="+", help="seeds (default: the preset's)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    parser.add_argument(
        "--lrs",
        type=finite_float,
        nargs="+",
        help=f"learning rates to sweep; each method keeps the best on validation data (default: {lrs})",
    )
    parser.add_argument(
        "--sweep-seeds",
        type=parse_seed,
        nargs="+",
        help="with --lrs: the seeds every rate runs on; the other --seeds then run at each method's selected "
        "rate only (default: every seed)",
    )
    parser.add_argument("--out", type=Path, help=f"output directory (default: {out})")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_fit_flag(parser: argparse.ArgumentParser) -> None:
    """Train-to-fit, for comparisons on tasks scored per sequence."""
    parser.add_argument(
        "--fit-accuracy",
        type=finite_float,
        help="train to fit: stop a run at the first validation whose full-sequence accuracy reaches this, with "
        "--steps as the cap; 0 trains every step (default: the preset's)",
    )


def comparison_arguments(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``run_comparison`` from the flags of ``add_comparison_flags`` (and, where the
    command has them, ``--fit-accuracy`` and ``--data-dir``)."""
    data_dir = getattr(args, "data_dir", None)
    return dict(
        methods=args.methods,
        seeds=args.seeds,
        steps=args.steps,
        lrs=args.lrs,
        sweep_seeds=args.sweep_seeds,
        fit_accuracy=getattr(args, "fit_accuracy", None),
        out=args.out,
        device=args.device,
        progress=not args.no_progress,
        command="tra " + shlex.join(args.argv),
        **({"task_args": {"data_dir": str(data_dir.expanduser().absolute())}} if data_dir else {}),
    )


def named(name: str, flag: str):
    """The experiment called ``name``, or a ValueError naming the flag and the registered names."""
    found = experiments()
    if name not in found:
        raise ValueError(f"{flag} = {name!r}; expected one of {list(found)}")
    return found[name]


def compare(experiment, args: argparse.Namespace, **overrides) -> Path:
    """Run ``experiment``'s comparison with the command's flags (``overrides`` replace some); its page."""
    return run_comparison(experiment, args.preset, **{**comparison_arguments(args), **overrides}) / "results.md"


def compare_or_suite(args: argparse.Namespace, command: str, flag: str, usage: str, **overrides) -> Path:
    """The page of the task's comparison (the task given with ``flag``, written ``usage`` in errors) or of
    the suite (``--suite``, ``--tasks``)."""
    if args.suite == bool(args.task):
        raise ValueError(f"{command}: expected exactly one of {usage} and --suite")
    if args.suite:
        return run_suite(args.preset, tasks=args.tasks, **comparison_arguments(args))
    if args.tasks:
        raise ValueError(f"--tasks chooses the suite's tasks; expected it with --suite, not {flag}")
    return compare(named(args.task, flag), args, **overrides)


def cmd_compare(args) -> None:
    print(compare_or_suite(args, "tra compare", "TASK", "TASK").read_text())


def cmd_bench(args) -> None:
    """``tra compare`` with the task as ``--task`` and its output in runs/bench_<task>_<preset>."""
    out = args.out or (Path(f"runs/bench_{args.task}_{args.preset}") if args.task else None)
    print(compare_or_suite(args, "tra bench", "--task", "--task NAME", out=out).read_text())


def cmd_experiment(name: str, args) -> None:
    """An experiment's own command: ``tra compare NAME``."""
    print(compare(named(name, "command"), args).read_text())


def described(presets) -> str:
    return ", ".join(f"{name} ({p.description})" for name, p in presets.items())


def add_compare_commands(sub: argparse._SubParsersAction) -> None:
    """``tra compare``, ``tra bench`` and the command of each experiment that has one."""
    found = experiments()
    suite = ", ".join(suite_tasks())
    cp = sub.add_parser(
        "compare",
        help="TRA vs ablations vs baselines on any registered task (or the suite): train, select, evaluate, report",
        description="Train every method on a task with each method's learning rate chosen on validation data, "
        "evaluate it, write results.jsonl and the task's page (results.md and its plot). "
        + RESUMABLE
        + " Tasks: "
        + "; ".join(f"{name}: {e.summary}" for name, e in found.items()).replace("%", "%%"),
        formatter_class=HelpFormatter,
    )
    cp.add_argument("task", nargs="?", metavar="TASK", help=f"the task, one of {', '.join(found)} (default: none)")
    cp.add_argument("--suite", action="store_true", help=f"every suite task in turn: {suite}")
    cp.add_argument(
        "--tasks",
        nargs="+",
        type=registered(suite_tasks, "suite task"),
        help="with --suite: these tasks only (default: every suite task)",
    )
    every = "; ".join(f"{name}: {', '.join(e.presets)}" for name, e in found.items())
    add_comparison_flags(
        cp,
        f"one of the task's ({every})",
        methods="the task's: every registered kind"
        + "".join(f"; {name}: {' '.join(e.default_methods)}" for name, e in found.items() if e.default_methods),
        lrs="the preset's rate per method",
        out="runs/<task>_<preset>, or runs/suite_<preset>",
    )
    add_fit_flag(cp)
    cp.add_argument(
        "--data-dir", type=Path, help="lm: folder of the corpus files (default: austen ships with the package)"
    )
    cp.set_defaults(func=cmd_compare)

    bench = sub.add_parser(
        "bench",
        help="TRA vs ablations vs baselines on any procedural task (--task) or the whole suite (--suite)",
        description="Train every method on a task, trained to fit within a step cap, with each method's learning "
        "rate chosen on validation data; evaluate every test split (longer and shifted-density); write "
        "results.jsonl, results.md and accuracy.png. " + RESUMABLE + " The same as `tra compare`.",
        formatter_class=HelpFormatter,
    )
    bench.add_argument("--task", help=f"the task, one of {', '.join(found)} (default: none; or --suite)")
    bench.add_argument("--suite", action="store_true", help=f"every suite task in turn: {suite}")
    bench.add_argument(
        "--tasks",
        nargs="+",
        type=registered(suite_tasks, "suite task"),
        help="with --suite: these tasks only (default: every suite task)",
    )
    add_comparison_flags(
        bench,
        described(found[suite_tasks()[0]].presets),
        methods="every registered kind",
        lrs="the preset's rate per method",
        out="runs/bench_<task>_<preset> or runs/suite_<preset>",
    )
    add_fit_flag(bench)
    bench.set_defaults(func=cmd_bench)

    for name, experiment in found.items():
        if experiment.command:
            own = sub.add_parser(
                experiment.command,
                help=experiment.summary,
                description=f"{experiment.summary}: `tra compare {name}`. Writes results.jsonl and the page. "
                + RESUMABLE,
                formatter_class=HelpFormatter,
            )
            add_comparison_flags(
                own,
                described(experiment.presets),
                methods=" ".join(experiment.default_methods or ()) or "every registered kind",
                lrs="the preset's validated rate per method",
                out=f"runs/{name}_<preset>",
            )
            if experiment.fit_accuracy is not None:
                add_fit_flag(own)
            own.set_defaults(func=functools.partial(cmd_experiment, name))


def cmd_report(args) -> None:
    rows = read_rows(args.results / "results.jsonl")
    if not rows:
        raise ValueError(f"{args.results / 'results.jsonl'} is missing or empty; expected the rows of an experiment")
    writers: dict = {}
    for experiment in experiments().values():  # rows of a task get the page of the first experiment on it
        writers.setdefault(experiment.task, experiment.write_report)
    task = rows[0].get("task")
    if task not in writers:
        raise ValueError(
            f"{args.results}: rows of task {task!r}; expected rows of an experiment with a report page, "
            f"one of {sorted(writers)}"
        )
    path = writers[task](args.results, notes=args.notes, markdown=args.markdown, command=args.command or "")
    print(path.read_text())


def add_report_command(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser(
        "report", help="rebuild the Markdown page and plot of a results directory", formatter_class=HelpFormatter
    )
    rp.add_argument("results", type=Path, help="directory holding results.jsonl")
    rp.add_argument("--notes", type=Path, help="Markdown appended as a discussion section (default: none)")
    rp.add_argument("--markdown", type=Path, help="where to write the page (default: RESULTS/results.md)")
    rp.add_argument("--command", help="the command that produced the rows, shown on the page (default: run.json's)")
    rp.set_defaults(func=cmd_report)


def cmd_pool(args) -> None:
    methods, count = pool(args.folders, args.out, args.methods, args.seeds, args.lrs, "tra " + shlex.join(args.argv))
    print(f"{args.out}: {count} rows of {len(methods)} methods ({' '.join(methods)}); the page: tra report {args.out}")


def add_pool_command(sub: argparse._SubParsersAction) -> None:
    pp = sub.add_parser(
        "pool",
        help="pool finished comparisons of one task into one results folder (one page with every method)",
        description="Each method's rows, sweep and chosen learning rate from the first folder that has it, written "
        "to --out for `tra report`. Refused unless every pooled method shares the training budget, the seeds and "
        "the learning-rate sweep (experiments/pool.py).",
        formatter_class=HelpFormatter,
    )
    pp.add_argument("folders", nargs="+", type=Path, help="results folders of one task, earlier ones first")
    pp.add_argument("--out", type=Path, required=True, help="the pooled folder (required; not one of the sources)")
    pp.add_argument("--methods", nargs="+", type=method_name, help="these methods only (default: every method)")
    pp.add_argument("--seeds", nargs="+", type=parse_seed, help="these seeds only (default: every seed)")
    pp.add_argument(
        "--lrs",
        nargs="+",
        type=finite_float,
        help="keep the sweeps' rows at these rates only, to pool methods swept over a wider grid with methods swept "
        "over these; refused if a method's chosen rate is not among them (default: every rate)",
    )
    pp.set_defaults(func=cmd_pool)


def cmd_scorecard(args) -> None:
    columns, table, sources = scorecard(
        args.candidates,
        args.baseline,
        args.text,
        args.exact,
        args.exact_longest,
        args.fits,
        args.text_tolerance,
        args.long_tolerance,
    )
    notes = args.notes.read_text() if args.notes else ""
    page = scorecard_page(columns, table, sources, args.command or "tra " + shlex.join(args.argv), notes)
    if args.markdown:
        atomic_write_text(args.markdown, page)
    print(page)


def add_scorecard_command(sub: argparse._SubParsersAction) -> None:
    sc = sub.add_parser(
        "scorecard",
        help="check candidate configurations against several bars at once (text, exactness, fitting)",
        description="Pool the rows of finished comparisons (one column per task and bar) and check each candidate "
        "against a baseline: text bits per byte near the baseline's, exact on every split, exact at the longest "
        "length, fitted as often (experiments/scorecard.py).",
        formatter_class=HelpFormatter,
    )
    folders = {"nargs": "+", "type": Path, "default": []}
    sc.add_argument("--candidates", nargs="+", required=True, help="the methods to check (required)")
    sc.add_argument("--baseline", default="fox", help="the method the bars are relative to")
    sc.add_argument("--text", **folders, help="folders of `tra compare lm` rows: bits per byte near the baseline's")
    sc.add_argument("--exact", **folders, help="folders whose every test split must be exact in every seed")
    sc.add_argument("--exact-longest", **folders, help="folders that must be exact at their longest length")
    sc.add_argument("--fits", **folders, help="folders of runs trained to fit: fitted in as many seeds as the baseline")
    sc.add_argument(
        "--text-tolerance", type=finite_float, default=0.005, help="relative bits-per-byte gap allowed at 1x"
    )
    sc.add_argument(
        "--long-tolerance", type=finite_float, default=0.0, help="relative gap allowed at the longest length"
    )
    sc.add_argument("--notes", type=Path, help="Markdown appended as the discussion (default: none)")
    sc.add_argument("--markdown", type=Path, help="write the page here (default: print only)")
    sc.add_argument("--command", help="the command shown on the page (default: this one)")
    sc.set_defaults(func=cmd_scorecard)
