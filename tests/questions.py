"""Question folders for tests: a spec written to a temporary folder (under ``results/``, its evidence beside it)."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_question(root: Path, task, kinds=("tra", "nope"), lrs=(1e-3, 3e-3), seeds=(0,), preset="tiny", **fields):
    """``root/results/<name>/spec.py`` asking ``task`` (a name or a tuple) of ``kinds``; its folder."""
    name = fields.pop("name", task if isinstance(task, str) else "_".join(task))
    folder = Path(root) / "results" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "runs").mkdir(exist_ok=True)
    extra = "".join(f"    {key}={value!r},\n" for key, value in fields.items())
    source = f"""
        from tra_attn.experiments.methods import kinds
        from tra_attn.experiments.spec import Question

        spec = Question(
            title="Tiny: does the pipeline work on {task}?",
            task={task!r},
            preset={preset!r},
            methods=kinds(*{tuple(kinds)!r}),
            seeds={tuple(seeds)!r},
            lrs={tuple(lrs)!r},
            lrs_source="a test",
        {extra})
    """
    (folder / "spec.py").write_text(textwrap.dedent(source))
    return folder
