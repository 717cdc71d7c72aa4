"""Training a question's missing runs on several workers at once: local processes (``tra run --jobs N``), or
jobs of a scheduler through submitit (``--executor slurm``; ``submitit-local`` runs submitit's jobs on this
machine).

The runs train in waves. A wave is every run the evidence and the store lack whose config is known (a seed that
trains at a swept rate is known once its sweep is in); each worker trains one run into the store and writes its
record to the evidence, as a single ``tra run`` would, under the run's lock (``engine.Source``), so two workers
never train one run and a worker that was stopped leaves a checkpoint the next one resumes. The page is written
afterwards, by the process that asked, from the records alone.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import multiprocessing
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .engine import Run, Source
from .run import page_of
from .spec import load_spec
from .store import Evidence, RunStore

EXECUTORS = ("processes", "submitit-local", "slurm")
# What a submitit job asks for unless --cluster-option says otherwise: one run per job on one core, a day at most.
CLUSTER_DEFAULTS = {"timeout_min": 24 * 60, "cpus_per_task": 1, "nodes": 1, "tasks_per_node": 1}


@dataclass(frozen=True)
class Job:
    """One run of one spec for one worker: everything it needs travels as text (a scheduler pickles it)."""

    spec: str
    run: str
    store: str
    evidence: str
    device: str
    threads: int
    describe: str = ""  # the method, rate and seed, for the log


def plan(spec_file: Path, store: RunStore, evidence: Path, device: str = "cpu") -> tuple[list[Run], set[str]]:
    """The runs the spec lacks whose config is known, each once, and which of them it needs as checkpoints (an
    inspection reads models, not rows)."""
    source = Source(Evidence(evidence), store, train=False, progress=False)
    page_of(load_spec(spec_file), spec_file.parent, source, "", plots=False, device=device)
    runs = list({run.id: run for run in source.missing}.values())
    return runs, source.checkpoints_missing


def train_job(job: Job) -> str:
    """What a worker runs: train (or resume) the job's run in the store and write its record to the evidence;
    nothing if another worker finished it first. The run's id."""
    torch.set_num_threads(job.threads)
    store = RunStore(job.store)
    runs, checkpoints = plan(Path(job.spec), store, Path(job.evidence), job.device)
    run = next((r for r in runs if r.id == job.run), None)
    if run is None:
        return job.run
    source = Source(Evidence(job.evidence), store, train=True, progress=False)
    try:
        if run.id in checkpoints:
            source.checkpoint(run)
        else:
            source.record(run)
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: training saved a checkpoint; a plain error travels back
        raise RuntimeError(f"stopped ({err}); its checkpoint stays in the store") from None
    return job.run


def cluster_executor(kind: str, folder: Path, options: dict):
    """A submitit executor: SLURM, or submitit's local one; its logs in ``folder``."""
    try:
        import submitit
    except ImportError:
        needs = "pip install 'threshold-relative-attention[cluster]'"
        raise ValueError(f"--executor {kind} needs submitit, which is not installed: {needs}") from None
    executor = submitit.AutoExecutor(folder=folder, cluster="local" if kind == "submitit-local" else "slurm")
    try:  # submitit keeps the options of its executor and drops the other schedulers' (slurm_...)
        executor.update_parameters(name="tra-run", **{**CLUSTER_DEFAULTS, **options})
    except Exception as err:
        raise ValueError(f"--cluster-option: {err}") from None
    return executor


def check_executor(kind: str, options: dict) -> None:
    """A ValueError now, before any run, if submitit is missing or refuses the options (in a scratch folder)."""
    if kind != "processes":
        with tempfile.TemporaryDirectory() as scratch:
            cluster_executor(kind, Path(scratch), options)
    elif options:
        raise ValueError(f"--cluster-option {sorted(options)}: options of a scheduler's jobs; expected --executor "
                         "slurm or submitit-local with them")  # fmt: skip


class WorkerFailed(ValueError):
    """Runs whose worker raised or died: each named with its error (``tra`` prints it as one line)."""


def train_missing(
    spec_file: Path, store: RunStore, evidence: Path, jobs: int, executor: str = "processes",
    cluster_options: dict | None = None, device: str = "cpu", log=print,
) -> int:  # fmt: skip
    """Train every run the spec lacks on ``jobs`` workers (local processes splitting this process's threads, or
    submitit jobs), wave after wave until none lacks; how many runs were trained. A worker's error stops the
    waves once the current one is done, naming each failed run."""
    options = dict(cluster_options or {})
    threads = max(1, torch.get_num_threads() // jobs) if executor == "processes" else options.get("cpus_per_task", 1)
    trained: set[str] = set()
    while True:
        runs, _ = plan(spec_file, store, evidence, device)
        if not runs:
            return len(trained)
        again = sorted(r.describe() for r in runs if r.id in trained)
        if again:
            raise WorkerFailed(f"{spec_file}: {', '.join(again)} trained but still missing from {evidence}")
        log(f"{spec_file.parent}: training {len(runs)} run(s), {jobs} at a time ({executor})", flush=True)
        wave = [Job(str(spec_file), r.id, str(store.root), str(evidence), device, threads, r.describe()) for r in runs]
        failed = _run_wave(wave, jobs, executor, store.root / ".submitit", options, log)
        trained |= {job.run for job in wave}
        if failed:
            named = "; ".join(f"{job.describe} ({job.run}): {err}" for job, err in failed)
            raise WorkerFailed(f"{named}; the other runs of the wave finished: run the same command again to continue")


def _run_wave(wave: list[Job], jobs: int, executor: str, logs: Path, options: dict, log) -> list[tuple[Job, str]]:
    """Run the wave's jobs; (job, error) for each that failed."""
    failed = []
    if executor == "processes":
        context = multiprocessing.get_context("spawn")  # a fork would copy this process's OpenMP threads
        with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = {pool.submit(train_job, job): job for job in wave}
            for future in concurrent.futures.as_completed(futures):
                job = futures[future]
                try:
                    future.result()
                    log(f"done: {job.describe} ({job.run})", flush=True)
                except concurrent.futures.process.BrokenProcessPool:
                    failed.append((job, "a worker process died before the run ended (killed, or out of memory)"))
                except Exception as err:  # the worker's own error, re-raised here
                    failed.append((job, f"{type(err).__name__}: {err}"))
        return failed
    if executor == "slurm":  # one job array; the scheduler runs at most ``jobs`` of it at once
        options = {**options, "slurm_array_parallelism": jobs}
    submitted = cluster_executor(executor, logs, options)
    step = jobs if executor == "submitit-local" else len(wave)  # the local executor starts every job it is given
    for start in range(0, len(wave), step):
        part = wave[start : start + step]
        with submitted.batch():
            handles = [submitted.submit(train_job, job) for job in part]
        for job, handle in zip(part, handles):
            try:
                handle.result()
                log(f"done: {job.describe} ({job.run}; job {handle.job_id})", flush=True)
            except Exception as err:  # submitit's FailedJobError carries the job's log tail
                failed.append((job, f"job {handle.job_id}: {err}"))
    return failed
