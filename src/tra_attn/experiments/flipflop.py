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
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint, load_train_state
from ..config import ModelConfig
from ..evaluate import evaluate_checkpoint, flipflop_splits, result_rows
from ..layers import ATTENTION_LAYERS
from ..train import TrainConfig, train
from ..utils.atomic import atomic_write_text
from ..utils.jsonl import read_jsonl, write_jsonl
from ..utils.provenance import git_commit

METHODS = ("tra", "nope", "rope", "alibi", "fox", "cope", "tra_keygate", "tra_nothreshold", "tra_nodistance")


@dataclass(frozen=True)
class Preset:
    """A model size, training recipe, learning rate per method, seeds and test-set size."""

    model: dict
    train: dict
    lrs: dict[str, float]
    seeds: tuple[int, ...]
    eval_sequences: int
    description: str


PRESETS = {
    # Learning rates per method: the selection on validation data of the sweep
    # `tra flipflop --lrs 1e-3 3e-3 1e-2 --seeds 0 --out results/flipflop_cpu` (its selected_lrs.json).
    "cpu": Preset(
        model=dict(d_model=128, n_layers=2, n_heads=4, block_style="prenorm", dropout=0.0, cope_max_pos=128),
        train=dict(
            length=128,
            steps=800,
            batch_size=64,
            warmup_steps=50,
            weight_decay=0.01,
            grad_clip=1.0,
            eval_every=100,
            eval_sequences=512,
            checkpoint_every=200,
        ),
        lrs={
            "tra": 1e-3,
            "nope": 1e-3,
            "rope": 3e-3,
            "alibi": 1e-3,
            "fox": 1e-3,
            "cope": 3e-3,
            "tra_keygate": 1e-3,
            "tra_nothreshold": 1e-3,
            "tra_nodistance": 1e-3,
        },
        seeds=(0,),
        eval_sequences=1000,
        description="2 layers, d_model 128, 4 heads; 128-token FFL(0.8), batch 64, 800 steps; at most about "
        "6 minutes per run on 2 CPU cores",
    ),
    # A smoke test of the whole pipeline: seconds on a CPU, no meaningful accuracy.
    "tiny": Preset(
        model=dict(d_model=16, n_layers=1, n_heads=2, block_style="prenorm", dropout=0.0, cope_max_pos=16),
        train=dict(
            length=16,
            steps=20,
            batch_size=8,
            warmup_steps=2,
            weight_decay=0.01,
            grad_clip=1.0,
            eval_every=10,
            eval_sequences=32,
            checkpoint_every=10,
        ),
        lrs={method: 3e-3 for method in METHODS},
        seeds=(0,),
        eval_sequences=64,
        description="smoke test (1 layer, d_model 16, 16-token sequences, 20 steps)",
    ),
    # DESIGN.md section 4: the TRA authors' notebook recipe (a GPU job).
    "paper": Preset(
        model=dict(d_model=256, n_layers=4, n_heads=4, block_style="paper", dropout=0.01, cope_max_pos=512),
        train=dict(
            length=512,
            steps=25_000,
            batch_size=64,
            warmup_steps=0,
            weight_decay=0.01,
            grad_clip=0.0,
            eval_every=1000,
            eval_sequences=1000,
            checkpoint_every=1000,
            precision="bf16",
        ),
        lrs={method: 1e-4 for method in METHODS},
        seeds=(0, 1, 2, 3),
        eval_sequences=4000,
        description="4 layers, d_model 256, 4 heads; 512-token FFL(0.8), batch 64, 25,000 steps, AdamW 1e-4, "
        "bf16 autocast (a GPU job: --device cuda)",
    ),
}


def check_methods(methods) -> list[str]:
    unknown = [m for m in methods if m not in ATTENTION_LAYERS]
    if unknown:
        raise ValueError(f"--methods: unknown method(s) {unknown}; expected names from {sorted(ATTENTION_LAYERS)}")
    return list(methods)


def run_config(preset: Preset, method: str, lr: float, seed: int, steps: int | None, device: str) -> TrainConfig:
    model = ModelConfig(vocab_size=6, attention=method, **preset.model)
    train_args = dict(preset.train)
    if steps is not None:
        train_args["steps"] = steps
        train_args["checkpoint_every"] = min(train_args["checkpoint_every"], steps)
    return TrainConfig(model=model, lr=lr, seed=seed, device=device, **train_args)


def run_dir(out: Path, method: str, lr: float, seed: int) -> Path:
    return out / "runs" / method / f"lr{lr:g}-seed{seed}"


def evaluate_final_checkpoint(config: TrainConfig, directory: Path, eval_sequences: int) -> list[dict]:
    """Test-split rows of a run's final checkpoint."""
    checkpoint = latest_checkpoint(directory)
    rows = evaluate_checkpoint(checkpoint, sequences=eval_sequences, device=config.device)
    return [{**r, "lr": config.lr} for r in rows]


def run_one(config: TrainConfig, directory: Path, eval_sequences: int, progress: bool) -> list[dict]:
    """Train and evaluate one run, or return its saved rows if it already finished with this config."""
    rows_path = directory / "eval.jsonl"
    saved = directory / TRAIN_CONFIG_NAME
    if saved.is_file() and json.loads(saved.read_text()) != config.to_dict():
        raise ValueError(f"{directory} holds a run with a different config; use another --out or remove it")
    expected = {(split, length) for split, _, length in flipflop_splits(config.length)}
    if rows_path.is_file():
        rows = read_jsonl(rows_path)
        if expected <= {(r["split"], r["length"]) for r in rows}:
            return rows
        # Evaluated before a test split existed: evaluate the final checkpoint again, keep the rest.
        validation = [r for r in rows if r["split"] == "validation"]
        rows = validation + evaluate_final_checkpoint(config, directory, eval_sequences)
        write_jsonl(rows_path, rows)
        return rows
    checkpoint = train(config, directory, resume=latest_checkpoint(directory) is not None, progress=progress)
    _, state = load_train_state(checkpoint)
    validation = [r for r in read_jsonl(directory / "metrics.jsonl") if "val_full_seq_acc" in r][-1]
    common = {"method": config.model.attention, "seed": config.seed, "config": config.to_dict(), "lr": config.lr}
    rows = evaluate_final_checkpoint(config, directory, eval_sequences)
    rows += result_rows(
        {
            "full_seq_acc": validation["val_full_seq_acc"],
            "loss": validation["val_loss"],
            "train_seconds": state["train_seconds"],
        },
        split="validation",
        length=config.length,
        **common,
    )
    write_jsonl(rows_path, rows)
    return rows


def select_lrs(rows: list[dict]) -> dict[str, float]:
    """Per method, the learning rate with the best mean validation full-sequence accuracy over seeds.

    Ties go to the smallest learning rate: where several fit the task equally well, the gentlest is
    the least likely to diverge on a seed the sweep did not see.
    """
    accuracy: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in rows:
        if r["split"] == "validation" and r["metric"] == "full_seq_acc":
            accuracy[(r["method"], r["lr"])].append(-math.inf if math.isnan(r["value"]) else r["value"])
    best: dict[str, tuple[float, float]] = {}
    for (method, lr), values in sorted(accuracy.items()):
        mean = sum(values) / len(values)
        if method not in best or mean > best[method][0]:
            best[method] = (mean, lr)
    return {method: lr for method, (_, lr) in best.items()}


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
    from ..report import write_flipflop_report

    if preset_name not in PRESETS:
        raise ValueError(f"--preset = {preset_name!r}; expected one of {sorted(PRESETS)}")
    preset = PRESETS[preset_name]
    methods = check_methods(methods or METHODS)
    seeds = list(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("--seeds: expected at least one seed")
    if steps is not None and steps <= 0:
        raise ValueError(f"--steps = {steps}; expected a positive integer")
    out = Path(out or f"runs/flipflop_{preset_name}")
    out.mkdir(parents=True, exist_ok=True)
    git_commit()  # record the code version now, before anything can change the working tree
    rows = []
    for method in methods:
        for lr in lrs or [preset.lrs[method]]:
            for seed in seeds:
                config = run_config(preset, method, lr, seed, steps, device)
                directory = run_dir(out, method, lr, seed)
                print(f"[flipflop] {method} lr={lr:g} seed={seed} -> {directory}", flush=True)
                rows += run_one(config, directory, preset.eval_sequences, progress)
    selected = select_lrs(rows)
    results = [r for r in rows if r["lr"] == selected[r["method"]]]
    write_jsonl(out / "results.jsonl", results)
    if lrs and len(lrs) > 1:
        write_jsonl(out / "sweep.jsonl", rows)
        atomic_write_text(out / "selected_lrs.json", json.dumps(selected, indent=2, sort_keys=True))
    atomic_write_text(
        out / "run.json", json.dumps({"command": command, "preset": f"{preset_name}: {preset.description}"})
    )
    write_flipflop_report(out)
    return out
