"""The flip-flop comparison: TRA, its ablations and every baseline on the same data, seeds and budget.

For each method, each learning rate and each seed: train, then evaluate on IID FFL(0.8), sparse
FFL(0.98) and dense FFL(0.1) at the training length, on IID sequences 2x, 4x and 8x longer and on
sparse sequences 8x longer. With several learning rates, each method keeps the one with the best
validation (IID, held-out) full-sequence accuracy, ties going to the smallest learning rate; the
test splits play no part in the choice. Finished runs are skipped and unfinished ones resume from
their last checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...data.synthetic.flipflop import FlipFlop, split_params
from ...layers import ATTENTION_KINDS
from ...models import ModelConfig
from ...training import TrainConfig, train
from ...training.checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint, load_train_state
from ...training.evaluation import evaluate_checkpoint, result_rows
from ...training.loop import METRICS_NAME
from ...utils.jsonl import read_jsonl, write_jsonl
from ..runs import plan_comparison, run_dir, run_grid, write_selection
from ..selection import select_lrs as select_best_lrs
from ..variants import resolve_method
from .presets import PRESETS, TASK_ARGS, Preset
from .rows import upgrade_rows


def run_config(preset: Preset, method: str, lr: float, seed: int, steps: int | None, device: str) -> TrainConfig:
    variant = resolve_method(method)
    model = ModelConfig(
        vocab_size=FlipFlop.vocab_size, attention=variant.attention, **{**preset.model, **variant.model}
    )
    train_args = {**preset.train, **variant.train}
    if steps is not None:
        train_args["steps"] = steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], steps)
    return TrainConfig(
        task=FlipFlop.name, task_args=dict(TASK_ARGS), model=model, lr=lr, seed=seed, device=device, **train_args
    )


def evaluate_final_checkpoint(method: str, config: TrainConfig, directory: Path, eval_sequences: int) -> list[dict]:
    """Test-split rows of a run's final checkpoint, named after ``method`` (a kind or a variant)."""
    checkpoint = latest_checkpoint(directory)
    rows = evaluate_checkpoint(checkpoint, sequences=eval_sequences, device=config.device)
    return [{**r, "method": method, "lr": config.lr} for r in rows]


def run_one(method: str, config: TrainConfig, directory: Path, eval_sequences: int, progress: bool) -> list[dict]:
    """Train and evaluate one run of ``method``, or return its saved rows if it already finished with this
    config."""
    rows_path = directory / "eval.jsonl"
    saved = directory / TRAIN_CONFIG_NAME
    if saved.is_file() and TrainConfig.from_dict(json.loads(saved.read_text())).to_dict() != config.to_dict():
        raise ValueError(f"{directory} holds a run with a different config; use another --out or remove it")
    expected = {(split, length) for split, _, length in split_params(config.length)}
    if rows_path.is_file():
        rows = upgrade_rows(read_jsonl(rows_path))
        if expected <= {(r["split"], r["length"]) for r in rows}:
            return rows
        # Evaluated before a test split existed: evaluate the final checkpoint again, keep the rest.
        validation = [r for r in rows if r["split"] == "validation"]
        rows = validation + evaluate_final_checkpoint(method, config, directory, eval_sequences)
        write_jsonl(rows_path, rows)
        return rows
    checkpoint = train(config, directory, resume=latest_checkpoint(directory) is not None, progress=progress)
    _, state = load_train_state(checkpoint)
    validation = [r for r in read_jsonl(directory / METRICS_NAME) if "val_full_seq_acc" in r][-1]
    common = {"method": method, "seed": config.seed, "config": config.to_dict(), "lr": config.lr}
    rows = evaluate_final_checkpoint(method, config, directory, eval_sequences)
    rows += result_rows(
        {
            "full_seq_acc": validation["val_full_seq_acc"],
            "loss": validation["val_loss"],
            "train_seconds": state["train_seconds"],
        },
        task=FlipFlop.name,
        split="validation",
        length=config.length,
        **common,
    )
    write_jsonl(rows_path, rows)
    return rows


def select_lrs(rows: list[dict]) -> dict[str, float]:
    """Per method, the learning rate with the best mean validation full-sequence accuracy (ties: smallest)."""
    return select_best_lrs(rows, "full_seq_acc", higher_is_better=True)


def run_flipflop(
    preset_name: str = "cpu",
    methods=None,
    seeds=None,
    steps: int | None = None,
    lrs: list[float] | None = None,
    out: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
    command: str = "",
) -> Path:
    """Run (or finish) the comparison and write results.jsonl, results.md and accuracy.png to ``out``."""
    from .report import write_report

    preset, methods, seeds, out = plan_comparison(
        "flipflop", PRESETS, preset_name, methods, list(ATTENTION_KINDS), seeds, steps, lrs, out
    )
    rows = []
    for method, lr, seed in run_grid(preset, methods, lrs, seeds):
        config = run_config(preset, method, lr, seed, steps, device)
        directory = run_dir(out, method, lr, seed)
        print(f"[flipflop] {method} lr={lr:g} seed={seed} -> {directory}", flush=True)
        rows += run_one(method, config, directory, preset.eval_sequences, progress)
    selected = select_lrs(rows)
    swept = bool(lrs) and len(lrs) > 1
    write_selection(out, rows, selected, swept, command, f"{preset_name}: {preset.description}")
    write_report(out)
    return out
