"""docs/layout.md, the contributors' map of the source: it names every package of src/tra_attn and every module of
the op, so a new folder or a new part of the op cannot go unmentioned."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src" / "tra_attn"
LAYOUT = (ROOT / "docs" / "layout.md").read_text()


def test_the_layout_names_every_package():
    packages = sorted(p.relative_to(ROOT).as_posix() for p in SRC.rglob("__init__.py"))
    folders = [name.removesuffix("/__init__.py") for name in packages]
    experiments = [f for f in folders if f.startswith("src/tra_attn/experiments/")]
    missing = [f for f in folders if f not in experiments and f"{f}/" not in LAYOUT]
    missing += [f for f in experiments if f"{f.rsplit('/', 1)[1]}/" not in LAYOUT]  # named in the experiments' row
    assert missing == []


def test_the_layout_names_every_module_of_the_op():
    modules = sorted(p.stem for p in (SRC / "ops" / "tra").glob("*.py") if p.stem != "__init__")
    modules += sorted(p.name for p in (SRC / "ops" / "tra" / "cpu").iterdir() if p.suffix in (".h", ".cpp"))
    assert [m for m in modules if not re.search(rf"(?<![\w.]){re.escape(m)}(?![\w])", LAYOUT)] == []
