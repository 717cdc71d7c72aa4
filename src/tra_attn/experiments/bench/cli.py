"""``tra bench``: the procedural-task comparison on any task (``--task``) or on the whole suite (``--suite``)."""

from __future__ import annotations

import argparse

from ...utils.cli_help import HelpFormatter
from ..runs import add_comparison_flags, add_synthetic_flags, synthetic_arguments
from .presets import PRESETS, SUITE_TASKS


def task_experiment(name: str):
    """(presets, page writer) of a task: the suite's, or those of the task's own experiment package."""
    from .. import experiments
    from .report import write_report

    if name in PRESETS:
        return PRESETS[name], write_report
    module = experiments().get(name)
    if module is not None and hasattr(module, "PRESETS"):
        return module.PRESETS, module.write_report
    raise ValueError(f"--task = {name!r}; expected one of {bench_tasks()}")


def bench_tasks() -> list[str]:
    """Every task ``tra bench --task`` runs: the suite's and those of experiment packages with presets."""
    from .. import experiments

    others = [name for name, module in experiments().items() if hasattr(module, "PRESETS") and name not in PRESETS]
    return list(PRESETS) + others


def cmd_bench(args) -> None:
    from .run import run_comparison
    from .suite import run_suite

    kwargs = synthetic_arguments(args)
    if args.suite == bool(args.task):
        raise ValueError("tra bench: expected exactly one of --task NAME and --suite")
    if args.suite:
        page = run_suite(args.preset, tasks=args.tasks, **kwargs)
    else:
        if args.tasks:
            raise ValueError("--tasks chooses the suite's tasks; expected it with --suite, not --task")
        presets, write_report = task_experiment(args.task)
        page = write_report(run_comparison(args.task, presets, args.preset, **kwargs))
    print(page.read_text())


def add_commands(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser(
        "bench",
        help="TRA vs ablations vs baselines on any procedural task (--task) or the whole suite (--suite)",
        description="Train every method on a task, trained to fit within a step cap, with each method's learning "
        "rate chosen on validation data; evaluate every test split (longer and shifted-density); write "
        "results.jsonl, results.md and accuracy.png. Resumable: finished runs are skipped.",
        formatter_class=HelpFormatter,
    )
    bench.add_argument("--task", help=f"the task, one of {', '.join(bench_tasks())} (default: none; or --suite)")
    bench.add_argument("--suite", action="store_true", help=f"every suite task in turn: {', '.join(SUITE_TASKS)}")
    bench.add_argument("--tasks", nargs="+", help="with --suite: these tasks only (default: every suite task)")
    add_comparison_flags(
        bench,
        PRESETS[SUITE_TASKS[0]],
        methods="every registered kind",
        lrs="the preset's rate per method",
        out="runs/bench_<task>_<preset> or runs/suite_<preset>",
    )
    add_synthetic_flags(bench)
    bench.set_defaults(func=cmd_bench)
