"""Running a spec file: refused by name if it is not one, and any error of its own in one line, ``FILE:LINE: ...``.

A spec is Python that sets ``spec`` at its top level. ``tra run notes.md`` or a data file is refused before
anything runs; a syntax error, a misspelt name, a failed import or an exception the spec raises becomes a
``SpecError`` (a ValueError: ``tra`` prints it as one ``tra: error:`` line and exits 2) naming the line of the spec
where it happened, instead of a traceback through the loader.
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path


class SpecError(ValueError):
    """A spec file that is not one, or that failed while it ran: the message names the file and line."""


def _sets_spec(tree: ast.Module) -> bool:
    """Whether the module assigns the name ``spec`` at its top level."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "spec" for t in targets):
            return True
    return False


def _line_in(err: BaseException, path: Path) -> int | None:
    """The line of ``path`` that the traceback of ``err`` last passed through (None if it never did)."""
    line, tb = None, err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def run_spec_file(path: Path) -> dict:
    """The namespace of the spec file ``path`` after running it; a SpecError naming the file (and the line) if it
    is not a spec or fails."""
    expected = (
        "expected a spec: a Python file that sets spec = Question(...), Scorecard(...), Overview(...) or "
        "Inspection(...), such as results/<question>/spec.py"
    )
    if path.suffix != ".py":
        raise SpecError(f"{path}: not a spec (not a .py file); {expected}")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as err:
        raise SpecError(f"{path}:{err.lineno}: {err.msg}; {expected}") from None
    except ValueError as err:  # source with a NUL byte
        raise SpecError(f"{path}: not Python ({err}); {expected}") from None
    if not _sets_spec(tree):
        raise SpecError(f"{path}: never sets spec; {expected}")
    try:
        return runpy.run_path(str(path))
    except SpecError:
        raise  # a spec this one loads (load_question) already named its own file and line
    except Exception as err:
        line = _line_in(err, path)
        where = f"{path}:{line}" if line is not None else str(path)
        what = str(err) if type(err) is ValueError else f"{type(err).__name__}: {err}"  # a check says what it is
        raise SpecError(f"{where}: {what}") from None
