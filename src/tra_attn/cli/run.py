"""``tra run SPEC``: a question's runs and page; ``tra flipflop``: the main job, flip-flop for every kind."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ..experiments.engine import Missing, Source
from ..experiments.flipflop.main_job import main_job
from ..experiments.run import build_page, default_evidence, page_of, run_spec
from ..experiments.spec import spec_path
from ..experiments.store import Evidence, RunStore
from ..experiments.workers import EXECUTORS, check_executor, train_missing
from ..utils.atomic import atomic_write_text, make_directory
from ..utils.cli_help import HelpFormatter
from .args import device_arg, path_arg, positive_int
from .train import parse_seed

STORE_HELP = "the run store: training folders and checkpoints (default: $TRA_STORE, else ~/.cache/tra/runs)"


def add_store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=path_arg, help=STORE_HELP)
    parser.add_argument(
        "--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N (runs on another device are other runs)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def refuse_file(path, flag: str, expected: str = "a directory") -> None:
    """A ValueError if the folder ``path`` given by ``flag`` is a file (before any work; it is made later)."""
    if path is not None and path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file; expected {expected} (new or existing)")


def store_of(args) -> RunStore:
    """The run store of ``--store`` (made when a run is first trained there, after every check)."""
    refuse_file(args.store, "--store")
    return RunStore(args.store)


def cluster_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--cluster-option``: the value as an int or a float where it reads as one."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}; expected KEY=VALUE, e.g. slurm_partition=cpu or timeout_min=120")
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, value


def cmd_run(args) -> None:
    store = store_of(args)
    refuse_file(args.evidence, "--evidence", "a folder of run records")
    workers = args.jobs > 1 or args.executor != "processes"
    if (args.no_train or args.plan) and workers:
        raise ValueError("--jobs/--executor train runs; expected them without --no-train and --plan")
    check_executor(args.executor, dict(args.cluster_option))
    for spec in args.specs:
        if workers:
            spec_file = spec_path(spec)
            evidence = args.evidence or default_evidence(spec_file.parent)
            options = dict(args.cluster_option)
            train_missing(spec_file, store, evidence, args.jobs, args.executor, options, args.device)
        if args.plan:
            page = build_page(spec, store, args.evidence, train=False, plots=False, device=args.device)
            print(f"{page.path.parent}: {len(page.missing)} run(s) to train" + "".join(
                f"\n  {run.describe()} on {run.experiment.task} ({run.id})" for run in page.missing))  # fmt: skip
            continue
        page = run_spec(
            spec, store=store, evidence=args.evidence, train=not args.no_train, progress=not args.no_progress,
            plots=not args.no_plots, device=args.device, partial=args.partial,
        )  # fmt: skip
        partial = f" (partial: {page.partial})" if page.partial else ""
        print(f"wrote {page.path}{partial}")


def add_run_command(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser(
        "run",
        help="a question: train the runs its spec needs that the store lacks, then write its page",
        description="Load each SPEC (a results/<question>/spec.py, or its folder), obtain every run it needs from "
        "the evidence (committed rows), the store, or by training, and write the question's README.md from the rows "
        "(experiments/run.py). Resumable: finished runs are reused, interrupted ones continue.",
        formatter_class=HelpFormatter,
    )
    rp.add_argument("specs", nargs="+", type=path_arg, metavar="SPEC", help="spec files or question folders")
    rp.add_argument(
        "--evidence", type=path_arg, help="the folder of run records (default: runs/ beside the question's folder)"
    )
    rp.add_argument("--no-train", action="store_true", help="write the page from the rows alone; refuse if runs lack")
    rp.add_argument("--plan", action="store_true", help="list the runs that would be trained, and do nothing")
    rp.add_argument(
        "--partial", action="store_true",
        help="with --no-train: write a question's page of the methods whose runs are all in, saying what is missing",
    )  # fmt: skip
    rp.add_argument("--no-plots", action="store_true", help="do not redraw the plots")
    rp.add_argument(
        "--jobs", type=positive_int, default=1,
        help="train up to N runs at once, each on its share of the threads (processes) or as N jobs of a scheduler",
    )  # fmt: skip
    rp.add_argument(
        "--executor", choices=EXECUTORS, default="processes",
        help="where --jobs run: local processes; submitit's jobs on this machine (submitit-local) or on SLURM (slurm), "
        "the store on a filesystem every node shares (docs/evidence.md)",
    )  # fmt: skip
    rp.add_argument(
        "--cluster-option", type=cluster_option, action="append", default=[], metavar="KEY=VALUE",
        help="a submitit option for each job: timeout_min, cpus_per_task, mem_gb, slurm_partition, slurm_account...",
    )  # fmt: skip
    add_store_flags(rp)
    rp.set_defaults(func=cmd_run)


def cmd_flipflop(args) -> None:
    question = main_job(args.preset, tuple(args.seeds))  # checked before any folder is made
    store = store_of(args)
    out = make_directory(args.out or Path(f"runs/flipflop_{args.preset}"), "--out")
    source = Source(Evidence(out / "runs"), store, train=True, progress=not args.no_progress)
    page = page_of(question, out, source, "tra " + shlex.join(args.argv), device=args.device)
    if page.missing:
        raise Missing(page.missing, more=True)
    atomic_write_text(page.path, page.text)
    print(page.text)


def add_flipflop_command(sub: argparse._SubParsersAction) -> None:
    from ..experiments.flipflop import FLIPFLOP

    presets = ", ".join(f"{name} ({p.description})" for name, p in FLIPFLOP.presets.items())
    fp = sub.add_parser(
        "flipflop",
        help="the main job: TRA, its ablations and the paper's baselines on flip-flop, trained to fit, tested to 8x",
        description="Train TRA, its three ablations and the paper's baselines (NoPE, RoPE, ALiBi, FoX, CoPE) on "
        "flip-flop at the preset's validated learning rates, evaluate each on every test split and write "
        "OUT/README.md with its plot (experiments/flipflop/main_job.py; every kind, three seeds: tra run "
        "results/flipflop). Runs live in the store; resumable.",
        formatter_class=HelpFormatter,
    )
    fp.add_argument("--preset", default="cpu", choices=list(FLIPFLOP.presets), help=presets.replace("%", "%%"))
    fp.add_argument("--seeds", type=parse_seed, nargs="+", default=[0], help="seeds (default: 0)")
    fp.add_argument("--out", type=path_arg, help="the page and its rows (default: runs/flipflop_<preset>)")
    add_store_flags(fp)
    fp.set_defaults(func=cmd_flipflop)
