"""The commands the benchmark pages name, and the prepared GPU session, still run: their methods are current
ones and the `tra` commands parse (a page whose command no longer runs cannot be reproduced)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tra_attn.cli import build_parser
from tra_attn.experiments.methods import method_from_text

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "results" / "benchmarks").glob("*.md"))


def commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every command of a page's ``Command:`` line and of benchmarks/gpu_session.sh."""
    found = []
    for page in PAGES:
        for line in re.findall(r"^Command: `([^`]+)`", page.read_text(), re.M):
            found.append((page.name, shlex.split(line)))
    script = (ROOT / "benchmarks" / "gpu_session.sh").read_text().replace("\\\n", " ")
    for line in script.splitlines():
        if not line.startswith("stage "):  # stage NAME SECONDS COMMAND...
            continue
        argv = shlex.split(line)[3:]
        if argv[:2] == ["bash", "-c"]:  # a stage that redirects its output: the command before the redirection
            argv = shlex.split(argv[2].split(">")[0])
        found.append(("gpu_session.sh", ["python" if a in ("$py", "'$py'") else a for a in argv]))
    assert any(where == "gpu_session.sh" for where, _ in found), "no stage found in benchmarks/gpu_session.sh"
    return found


def test_every_benchmark_page_names_its_command():
    assert PAGES and all(page.name.endswith("_notes.md") or "Command: `" in page.read_text() for page in PAGES)


def named(value) -> str:
    return value if isinstance(value, str) else " ".join(value[:2])


@pytest.mark.parametrize(("where", "argv"), commands(), ids=named)
def test_the_methods_and_tra_commands_are_current(where, argv):
    argv = argv[1:] if argv[0] == "env" else argv
    while "=" in argv[0]:  # an environment variable set for the command
        argv = argv[1:]
    assert argv[0] == "python", (where, argv)
    if "--methods" in argv:
        methods = argv[argv.index("--methods") + 1 :]
        methods = methods[: next((i for i, a in enumerate(methods) if a.startswith("--")), len(methods))]
        assert methods, where
        for method in methods:
            method_from_text(method)  # a former name is refused by name
    if argv[:3] == ["python", "-m", "tra_attn"]:
        build_parser().parse_args([a.replace("$out", "out") for a in argv[3:]])
    elif argv[:3] == ["python", "-m", "pytest"]:
        assert all((ROOT / a).is_file() for a in argv[3:] if a.startswith("tests/")), (where, argv)
    else:
        assert (ROOT / argv[1]).is_file(), (where, argv)
