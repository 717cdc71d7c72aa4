"""The index of a results folder: one line per spec below it (its page, title and status, partial or whole),
written between two markers of the folder's ``README.md`` by ``tra run`` after each page it writes, so that the
index never lists a question its specs do not hold or a status its pages do not say."""

from __future__ import annotations

import re
from pathlib import Path

from ..utils.atomic import atomic_write_text
from .spec import SPEC_NAME, load_spec

START = "<!-- index: `tra run` writes this table from the specs and their pages -->"
END = "<!-- end of index -->"
PAGE_NAME = "README.md"
PARTIAL = re.compile(r"^Status: .*; (partial: \d+ of \d+ runs)$", re.MULTILINE)


def index_lines(folder: Path) -> list[str]:
    """The index table of the specs below ``folder``: its own questions alphabetically, then those of its
    subfolders (``archive/...``); the status is the spec's, and a partial page's count of runs."""
    specs = sorted(folder.rglob(SPEC_NAME), key=lambda p: (len(p.relative_to(folder).parts), p.as_posix()))
    lines = ["| question | status |", "|---|---|"]
    for spec_file in specs:
        spec = load_spec(spec_file)
        name = spec_file.parent.relative_to(folder).as_posix()
        page = spec_file.parent / PAGE_NAME
        found = PARTIAL.search(page.read_text()) if page.is_file() else None
        status = f"{spec.status}, {found.group(1)}" if found else spec.status
        lines.append(f"| [{name}]({name}/{PAGE_NAME}): {spec.title} | {status} |")
    return lines


def indexed(text: str, folder: Path) -> str | None:
    """``text`` (a README) with the table between its markers rebuilt from the specs below ``folder``; None if it
    has no markers."""
    if START not in text or END not in text.split(START, 1)[1]:
        return None
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    return before + START + "\n" + "\n".join(index_lines(folder)) + "\n" + END + after


def update_index(question_folder: Path) -> Path | None:
    """Rewrite the index of the results folder that holds ``question_folder`` (the nearest folder above it, at
    most two up, whose README has the markers); the README's path, or None where there is no index."""
    for parent in list(question_folder.resolve().parents)[:2]:
        readme = parent / PAGE_NAME
        text = readme.read_text() if readme.is_file() else ""
        new = indexed(text, parent)
        if new is not None:
            if new != text:
                atomic_write_text(readme, new)
            return readme
    return None
