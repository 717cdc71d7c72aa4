"""``run_retrofit``: train what the cache lacks, evaluate every row at 1x-16x the training length, and write the page
(``tra retrofit``: ``cli/retrofit.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ...data import make_task
from ...utils.atomic import make_directory
from .evaluation import row_values
from .plan import rows as page_rows
from .plan import stages
from .presets import retrofit_preset
from .report import page_text, write_page
from .stages import StageCache, default_cache


def run_retrofit(
    preset: str = "cpu",
    out: str | os.PathLike = "runs/retrofit_cpu",
    cache: str | os.PathLike | None = None,
    seed: int = 0,
    command: str = "",
    say: Callable[[str], None] = print,
) -> tuple[Path, StageCache]:
    """Run the experiment of ``preset`` ('cpu' or 'tiny') with ``seed``, its stages in ``cache`` (default
    ``~/.cache/tra/retrofit``); writes ``out/README.md`` (``command``: the line that made it) and its plot. Returns
    the page's path and the cache (which stages and evaluations it computed or reused)."""
    settings = retrofit_preset(preset)
    task = make_task("lm", **settings.task_args)
    task.check_data()
    out = make_directory(Path(out), "--out")
    stage_cache = StageCache(cache if cache is not None else default_cache(), say)
    validation = task.tokens("validation")
    span = settings.eval_tokens
    scored = validation if span is None else validation[-span:]
    what = {"data": settings.task_args, "last_tokens": span, "tokenized": len(validation)}
    found = stages(settings, seed, task.tokens("train"), task.vocab_size, stage_cache)
    listed = page_rows(settings, found)
    length = settings.train.length
    values = {r.label: row_values(r, stage_cache, scored, task.token_bytes(), length, what) for r in listed}
    infos = {r.label: stage_cache.info(r.stage) for r in listed}
    text = page_text(preset, settings, seed, listed, values, infos, command or f"tra retrofit --preset {preset}")
    return write_page(out, text, listed, values, length), stage_cache
