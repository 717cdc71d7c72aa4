"""The language-modelling comparison: every method on one corpus, budget and set of seeds, evaluated at
1x to 16x the training length. Each method's learning rate is the one with the best validation bits per
byte at the training length, on windows from the start of the validation text; evaluation scores the
end of that text, so the choice never sees the evaluation tokens or the longer lengths. Finished runs
are skipped and unfinished ones resume."""

from __future__ import annotations

import json
from pathlib import Path

from ...data import make_task
from ...models import ModelConfig
from ...training import TrainConfig, train
from ...training.checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint, load_train_state
from ...training.evaluation import result_rows
from ...training.loop import METRICS_NAME
from ...utils.jsonl import read_jsonl, write_jsonl
from ..methods import resolve_method
from ..runs import plan_comparison, run_dir, run_grid, write_selection
from ..selection import select_lrs
from .evaluate import evaluate_lm
from .presets import DEFAULT_METHODS, PRESETS, Preset

SELECTION_METRIC = "bits_per_byte"


def run_config(preset: Preset, method: str, lr: float, seed: int, steps, device: str, data_dir) -> TrainConfig:
    task_args = {**preset.task_args, **({"data_dir": str(data_dir)} if data_dir else {})}
    task = make_task("lm", **task_args)
    variant = resolve_method(method)
    model = ModelConfig(
        vocab_size=task.vocab_size,
        tokenizer=task.tokenizer_description(),
        attention=variant.attention,
        **{**preset.model, **variant.model},
    )
    train_args = {**preset.train, **variant.train}
    if steps is not None:
        train_args["steps"] = steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], steps)
    return TrainConfig(task="lm", task_args=task_args, model=model, lr=lr, seed=seed, device=device, **train_args)


def run_one(method: str, config: TrainConfig, directory: Path, eval_tokens: int | None, progress: bool) -> list[dict]:
    """Train and evaluate one run of ``method`` (a kind or a variant), or return its saved rows if it
    already finished with this config."""
    rows_path = directory / "eval.jsonl"
    saved = directory / TRAIN_CONFIG_NAME
    if saved.is_file() and TrainConfig.from_dict(json.loads(saved.read_text())).to_dict() != config.to_dict():
        raise ValueError(f"{directory} holds a run with a different config; use another --out or remove it")
    if rows_path.is_file():
        return read_jsonl(rows_path)
    checkpoint = train(config, directory, resume=latest_checkpoint(directory) is not None, progress=progress)
    _, state = load_train_state(checkpoint)
    validation = [r for r in read_jsonl(directory / METRICS_NAME) if "val_loss" in r][-1]
    seconds = state["train_seconds"]
    tokens_per_second = config.steps * config.batch_size * config.length / seconds
    # One position bucket per training length at 16x: where past the trained span the loss moves.
    rows = evaluate_lm(checkpoint, tokens=eval_tokens, buckets=16, device=config.device)
    rows += result_rows(
        {
            "loss": validation["val_loss"],
            SELECTION_METRIC: validation[f"val_{SELECTION_METRIC}"],
            "train_seconds": seconds,
            "tokens_per_second": tokens_per_second,
        },
        task="lm",
        split="validation",
        length=config.length,
        method=method,
        seed=config.seed,
        config=config.to_dict(),
    )
    rows = [{**r, "method": method, "lr": config.lr} for r in rows]
    write_jsonl(rows_path, rows)
    return rows


def run_lm(
    preset_name: str = "cpu",
    methods=None,
    seeds=None,
    steps: int | None = None,
    lrs: list[float] | None = None,
    out: str | Path | None = None,
    device: str = "cpu",
    data_dir: str | Path | None = None,
    progress: bool = True,
    command: str = "",
) -> Path:
    """Run (or finish) the comparison and write results.jsonl, results.md and the plots to ``out``."""
    from .report import write_report

    preset, methods, seeds, out = plan_comparison(
        "lm", PRESETS, preset_name, methods, DEFAULT_METHODS, seeds, steps, lrs, out
    )
    rows = []
    for method, lr, seed in run_grid(preset, methods, lrs, seeds):
        config = run_config(preset, method, lr, seed, steps, device, data_dir)
        directory = run_dir(out, method, lr, seed)
        print(f"[lm] {method} lr={lr:g} seed={seed} -> {directory}", flush=True)
        rows += run_one(method, config, directory, preset.eval_tokens, progress)
    selected = select_lrs(rows, SELECTION_METRIC, higher_is_better=False)
    swept = bool(lrs) and len(lrs) > 1
    write_selection(out, rows, selected, swept, command, f"{preset_name}: {preset.description}")
    write_report(out)
    return out
