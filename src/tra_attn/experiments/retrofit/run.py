"""``run_retrofit``: train what the cache lacks, evaluate every row at 1x-16x the training length, and write the page
(``tra retrofit``: ``cli/retrofit.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ...data import make_task
from ...utils.atomic import make_directory
from .evaluation import row_values, selection_value
from .plan import chosen_rate, continuations, stages
from .plan import rows as page_rows
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
    stage_cache = StageCache(cache if cache is not None else default_cache(), say)  # refused before --out is made
    out = make_directory(Path(out), "--out")
    validation = task.tokens("validation")
    selection, scored = settings.split_validation(validation)
    span, length = settings.eval_tokens, settings.train.length
    what = {"data": settings.task_args, "last_tokens": span, "tokenized": len(validation)}
    before = {**what, "before_last": span}
    found = stages(settings, seed, task.tokens("train"), task.vocab_size, stage_cache)
    sweep = {
        more.label: {lr: selection_value(stage, stage_cache, selection, task.token_bytes(), length, before)
                     for lr, stage in more.stages.items()}
        for more in continuations(settings, found)
    }  # fmt: skip
    listed = page_rows(settings, found, {label: chosen_rate(values) for label, values in sweep.items()})
    values = {r.label: row_values(r, stage_cache, scored, task.token_bytes(), length, what) for r in listed}
    infos = {r.label: stage_cache.info(r.stage) for r in listed}
    command = command or f"tra retrofit --preset {preset}"
    text = page_text(preset, settings, seed, listed, values, infos, sweep, command)
    return write_page(out, text, listed, values, length), stage_cache
