"""``tra run SPEC``: train what a question needs and the store lacks, then write its page from the rows.

A question folder holds ``spec.py``, the page it generates (``README.md``, with its plots) and, optionally,
``notes.md``, the discussion the page closes with. The rows come from the evidence folder (default: ``runs/``
beside the question folders, ``results/runs/`` for the questions under ``results/``), and what it lacks from
the run store or from training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..utils.atomic import atomic_write_text
from .engine import Missing, Results, Source, check_question, gather
from .inspection import inspection_lines
from .overview import overview_lines, overview_rows
from .pages.procedural import suite_summary
from .pages.tables import discussion_lines, page_header
from .results_index import update_index
from .scorecard import scorecard, scorecard_lines
from .spec import Inspection, Overview, Question, Scorecard, load_spec, spec_path
from .store import Evidence, RunStore

PAGE_NAME = "README.md"
NOTES_NAME = "notes.md"
EVIDENCE_NAME = "runs"
STATUS = {
    "current": "current",
    "pilot": "pilot: a narrow question a current page cites",
    "archived": "archived: superseded (the discussion says by what); kept for the pages that cite it",
}


@dataclass
class Page:
    """A written (or checked) page: its path and text, the runs it still lacks (training off) and the runs it read."""

    path: Path
    text: str
    missing: list
    runs: set[str]
    partial: str = ""  # a partial page's count: "4 of 350 runs"


def default_evidence(folder: Path) -> Path:
    """The evidence of a question folder: the nearest ``runs/`` beside it or beside a folder above it
    (``results/runs`` for ``results/<question>`` and ``results/archive/<question>``), else a new one beside it."""
    for parent in list(folder.resolve().parents)[:2]:
        if (parent / EVIDENCE_NAME).is_dir():
            return parent / EVIDENCE_NAME
    return folder.parent / EVIDENCE_NAME


def command_of(spec_file: Path, evidence: Path) -> str:
    """``tra run results/majority``: the question folder as seen from the folder above the evidence's parent
    (the repository root for ``results/runs``)."""
    root = evidence.resolve().parent.parent
    folder = spec_file.parent
    try:
        shown = folder.relative_to(root)
    except ValueError:
        shown = Path(os.path.relpath(folder, Path.cwd()))
    return f"tra run {shown.as_posix()}"


def question_lines(question: Question, results: list[Results], folder: Path, page: Path, plots: bool) -> list[str]:
    """The sections of a question's page: a summary for several tasks (their experiments' own, if they share one),
    then each task's section."""
    lines = []
    if len(results) > 1:
        summaries = {result.experiment.summary for result in results}
        summary = summaries.pop() if len(summaries) == 1 else None
        lines = summary(results, folder, page, plots) if summary else suite_summary(results)
    for result in results:
        if not result.rows:
            lines += [f"No rows of {result.experiment.task} yet.", ""]
            continue
        if len(results) > 1:
            lines += [f"## {result.experiment.task}", ""]
        level = "###" if len(results) > 1 else "##"
        lines += result.experiment.section(result, folder, page, level, plots)
    return lines


def retrained_lines(source: Source, inspected: bool = False) -> list[str]:
    """A section naming the page's runs that were trained more than once, before runs were stored by their config
    (``inspected``: the page shows checkpoints, whose training the table above names, not the records' rows)."""
    if not source.retrained:
        return []
    shows = (
        "The records keep each run's first training, the one the store would have reused; this page inspects the "
        "checkpoints named above, which may be a later training."
        if inspected
        else "This page shows each run's first training, the one the store would have reused; the later rows are in "
        "the git history of the folders named."
    )
    lines = [
        "## Runs trained twice",
        "",
        "Before runs were stored by their configuration, later comparisons trained some of these runs again, at "
        f"other commits, with other results. {shows}",
        "",
        "| run | trained again |",
        "|---|---|",
    ]
    for run, retrained in source.retrained.values():
        again = "; ".join(f"commit {r['commit']}, `{r['folder']}`" for r in retrained)
        lines.append(f"| {run.describe()} ({run.experiment.task}) | {again} |")
    return [*lines, ""]


def partial_count(results: list[Results]) -> str:
    """How many of a question's runs are in: ``37 of 560 runs``."""
    needed = sum(sum(result.needed.values()) for result in results)
    lacking = sum(sum(result.lacking.values()) for result in results)
    return f"{needed - lacking} of {needed} runs"


def partial_lines(results: list[Results], command: str) -> list[str]:
    """The section a partial page opens with: per task, the methods that lack runs, and how many."""
    lines = [
        "## Runs still missing",
        "",
        "This page is partial: a method appears once every run it needs is in (no mean over part of its seeds, no "
        f"rate chosen from part of its grid). `{command}` trains the rest; with `--plan` it lists them. A method "
        "whose rate is still being chosen counts its other seeds as missing.",
        "",
        "| task | method | runs in | runs missing |",
        "|---|---|---|---|",
    ]
    for result in results:
        for label, lacking in result.lacking.items():
            needed = result.needed[label]
            lines.append(f"| {result.experiment.task} | {label} | {needed - lacking} of {needed} | {lacking} |")
    return [*lines, ""]


def presets_line(results: list[Results]) -> str:
    """The preset, and what the question changes of its budget and task (the recipe lines below say it all)."""
    described = "; ".join(dict.fromkeys(f"{r.question.preset}: {r.preset.description}" for r in results))
    question = results[0].question
    changes = [f"{name} {value}" for name, value in (("steps", question.steps), ("fit_accuracy", question.fit_accuracy))
               if value is not None]  # fmt: skip
    changes += [f"{name}={value!r}" for name, value in question.task_args.items()]
    return described + (f"; this question changes it: {', '.join(changes)}" if changes else "")


def build_page(
    path, store: RunStore | None = None, evidence=None, train: bool = False, progress: bool = True, plots: bool = True,
    device: str = "cpu", log=print, partial: bool = False,
) -> Page:  # fmt: skip
    """The page of the spec at ``path`` (a spec file or its folder), from the evidence and the store; with
    ``train``, the runs they lack are trained first (``partial``: see ``page_of``). Nothing is written but the
    plots (``plots``) and the evidence of runs obtained from the store or from training."""
    spec_file = spec_path(path)
    evidence = Path(evidence) if evidence is not None else default_evidence(spec_file.parent)
    source = Source(Evidence(evidence), store or RunStore(), train=train, progress=progress, log=log)
    command = command_of(spec_file, evidence)
    return page_of(load_spec(spec_file), spec_file.parent, source, command, plots, device, partial)


def page_of(
    spec, folder: Path, source: Source, command: str, plots: bool = True, device: str = "cpu", partial: bool = False
) -> Page:
    """The page of ``spec`` in ``folder`` (``README.md``, closing with ``notes.md`` if there is one), its runs
    from ``source``; ``command`` is the one the page says made it. With runs missing, no page (``Page.missing``
    lists them), or with ``partial`` a question's page of the methods whose runs are all in, that says at its
    top how many runs it shows and which methods wait for the rest."""
    page = folder / PAGE_NAME
    status, progress, count = STATUS[spec.status], [], ""
    if isinstance(spec, Question):
        check_question(spec)
        results = [gather(spec, task, source, device) for task in spec.tasks]
        if source.missing and not partial:
            return Page(page, "", source.missing, source.seen)
        if source.missing:
            count, progress = partial_count(results), partial_lines(results, command)
            status = f"{status}; partial: {count}"
            results = [result.whole() for result in results]
        commits = {r["commit"] for result in results for r in result.rows + result.sweep}
        body = progress + question_lines(spec, results, folder, page, plots)
        preset = presets_line(results)
    elif isinstance(spec, Scorecard):
        for bar in spec.bars:
            for question in bar.questions:
                check_question(question)
        columns, table, commits = scorecard(spec, source, device)
        if source.missing:
            return Page(page, "", source.missing, source.seen)
        body = scorecard_lines(spec, columns, table)
        preset = ""
    elif isinstance(spec, Inspection):
        check_question(spec.question)
        body, commits = inspection_lines(spec, folder, source, device)
        if source.missing:
            return Page(page, "", source.missing, source.seen)
        preset = ""
    else:
        assert isinstance(spec, Overview)
        for column in spec.columns:
            for question in column.bar.questions:
                check_question(question)
        table, commits = overview_rows(spec, source, device)
        if source.missing:
            return Page(page, "", source.missing, source.seen)
        body = [*overview_lines(spec, table), ""]
        preset = ""
    lines = page_header(spec.title, command, commits or {"none yet"}, preset, status) + body
    lines += retrained_lines(source, inspected=isinstance(spec, Inspection))
    notes = folder / NOTES_NAME
    if notes.is_file():
        lines += [*discussion_lines(notes.read_text()), ""]
    return Page(page, "\n".join(lines), source.missing, source.seen, count)


def run_spec(path, write: bool = True, **options) -> Page:
    """``build_page``, write the page and the index of the results folder it is in (``results_index``); a
    ``Missing`` error (nothing written) if runs are missing and the page cannot be partial (``partial`` off, or a
    spec other than a question)."""
    page = build_page(path, **options)
    if page.missing and not page.text:
        raise Missing(page.missing, more=True)
    if write:
        atomic_write_text(page.path, page.text)
        update_index(page.path.parent)
    return page
