"""Training loop for procedural tasks: AdamW, cosine schedule, clipping, JSONL metrics, checkpoints, resume.

Batches are a pure function of (seed, step), and the optimizer and RNG states are checkpointed, so
``--resume`` continues exactly: N/2 steps + resume + N/2 steps gives bit-identical weights to N
steps straight.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .checkpoint import TRAIN_CONFIG_NAME, latest_checkpoint, load_train_state, save_checkpoint
from .config import ModelConfig, dataclass_from_dict
from .model import TransformerLM
from .tasks import make_task
from .utils.atomic import atomic_write_text
from .utils.jsonl import append_jsonl, read_jsonl, write_jsonl

_VALIDATION_SEED = 1_000_000_007  # validation sequences never coincide with a training batch seed


@dataclass
class TrainConfig:
    """Everything a run needs; saved as JSON next to every checkpoint."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: str = "flipflop"
    p_ignore: float = 0.8
    final_read: bool = True
    length: int = 128
    steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    min_lr_ratio: float = 0.0
    warmup_steps: int = 0
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0  # 0 disables clipping
    seed: int = 0
    log_every: int = 25
    eval_every: int = 250  # 0 disables periodic evaluation
    eval_sequences: int = 512
    checkpoint_every: int = 500
    device: str = "cpu"
    precision: str = "fp32"  # or "bf16": autocast the forward (GPU training; the TRA kernels then run in bf16)

    def __post_init__(self):
        if isinstance(self.model, dict):
            self.model = ModelConfig.from_dict(self.model)
        positive = ("length", "steps", "batch_size", "log_every", "eval_sequences", "checkpoint_every")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"TrainConfig.{name} = {value!r}; expected a positive integer")
        for name in ("warmup_steps", "eval_every", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"TrainConfig.{name} = {value!r}; expected a non-negative integer")
        ranges = {  # name: (lowest allowed, highest allowed, whether the highest is allowed)
            "lr": (1e-300, math.inf, False),
            "min_lr_ratio": (0.0, 1.0, True),
            "weight_decay": (0.0, math.inf, False),
            "beta1": (0.0, 1.0, False),
            "beta2": (0.0, 1.0, False),
            "grad_clip": (0.0, math.inf, False),
        }
        for name, (low, high, high_ok) in ranges.items():
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and low <= value and (value < high or (high_ok and value == high))
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} = {value!r}; expected a number in [{low:g}, {high:g}{']' if high_ok else ')'}"
                )
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"TrainConfig.precision = {self.precision!r}; expected 'fp32' or 'bf16'")
        task = self.task_instance()  # validates the task name and arguments
        if self.model.vocab_size < task.vocab_size:
            raise ValueError(
                f"ModelConfig.vocab_size = {self.model.vocab_size}; expected at least the "
                f"{self.task} vocabulary size {task.vocab_size}"
            )
        if self.length % 2:
            raise ValueError(f"TrainConfig.length = {self.length}; expected an even number of tokens")

    def task_instance(self):
        return make_task(self.task, p_ignore=self.p_ignore, final_read=self.final_read)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        return dataclass_from_dict(cls, data)


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr * min_lr_ratio`` at the last step."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(config.steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def masked_loss(model: TransformerLM, tokens: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the tokens marked in ``loss_mask``."""
    logits = model(tokens[:, :-1])
    targets = tokens[:, 1:].masked_fill(~loss_mask[:, 1:], -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def autocast(config: TrainConfig):
    """bf16 autocast of the forward pass, or a no-op for fp32."""
    device_type = torch.device(config.device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.precision == "bf16")


def batch_seed(seed: int, step: int) -> int:
    return seed * 1_000_003 + step


def build_optimizer(model: TransformerLM, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases, norm weights and other 1-d parameters."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2))


@torch.no_grad()
def validation_metrics(model: TransformerLM, config: TrainConfig, batch) -> dict:
    from .evaluate import sequence_metrics

    was_training = model.training
    model.eval()
    metrics = sequence_metrics(model, batch.tokens.to(config.device), batch.loss_mask.to(config.device))
    model.train(was_training)
    return metrics


def _restore(run_dir: Path, config: TrainConfig, resume: bool):
    """(model, optimizer, step, train seconds so far): fresh, or from the run's latest checkpoint."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None and not resume:
        raise ValueError(f"{run_dir} already holds checkpoints; pass --resume to continue or use a new directory")
    torch.manual_seed(config.seed)
    if checkpoint is None:
        if resume:
            print(f"--resume: no checkpoint in {run_dir}; starting from step 0")
        model = TransformerLM(config.model).to(config.device)
        return model, build_optimizer(model, config), 0, 0.0
    saved_config, state = load_train_state(checkpoint)
    if saved_config != config.to_dict():
        raise ValueError(
            f"--resume: the config differs from the one saved in {checkpoint}; "
            f"resume with the same settings or use a new output directory"
        )
    model = TransformerLM.from_pretrained(checkpoint, device=config.device)
    optimizer = build_optimizer(model, config)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    if "cuda_rng" in state:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return model, optimizer, state["step"], state.get("train_seconds", 0.0)


def train(config: TrainConfig, run_dir: str | Path, resume: bool = False, progress: bool = True) -> Path:
    """Train (or continue training) a model in ``run_dir``; returns the final checkpoint directory.

    Writes ``run_dir/train_config.json``, ``run_dir/metrics.jsonl`` and ``run_dir/checkpoints/``.
    On KeyboardInterrupt it saves a checkpoint of the current step before re-raising.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.jsonl"
    model, optimizer, start, seconds_before = _restore(run_dir, config, resume)
    # Log rows written after the checkpoint will be produced again.
    kept = [row for row in read_jsonl(metrics_path) if row["step"] <= start] if start else []
    write_jsonl(metrics_path, kept)
    atomic_write_text(run_dir / TRAIN_CONFIG_NAME, json.dumps(config.to_dict(), indent=2, sort_keys=True))
    task = config.task_instance()
    validation = task.sample(config.eval_sequences, config.length, _VALIDATION_SEED + config.seed)
    t0 = time.perf_counter()

    def seconds() -> float:
        return seconds_before + time.perf_counter() - t0

    def save(step: int) -> Path:
        state = {
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "step": step,
            "train_seconds": seconds(),
        }
        if torch.device(config.device).type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return save_checkpoint(run_dir, step, model, config.to_dict(), state)

    model.train()
    step = last_saved = start
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not progress,
        desc=f"{config.model.attention} {run_dir.name}",
        leave=False,
    )
    try:
        while step < config.steps:
            lr = learning_rate(config, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = task.sample(config.batch_size, config.length, batch_seed(config.seed, step))
            with autocast(config):
                loss = masked_loss(model, batch.tokens.to(config.device), batch.loss_mask.to(config.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip = config.grad_clip if config.grad_clip > 0 else math.inf
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            step += 1
            bar.update(1)
            if step % config.log_every == 0 or step == config.steps:
                row = {
                    "step": step,
                    "loss": loss.item(),
                    "lr": lr,
                    "grad_norm": grad_norm.item(),
                    "elapsed_s": seconds(),
                }
                append_jsonl(metrics_path, row)
                bar.set_postfix(loss=f"{row['loss']:.4f}")
            if config.eval_every and (step % config.eval_every == 0 or step == config.steps):
                val = validation_metrics(model, config, validation)
                append_jsonl(metrics_path, {"step": step, **{f"val_{k}": v for k, v in val.items()}})
            if step % config.checkpoint_every == 0 or step == config.steps:
                save(step)
                last_saved = step
    except KeyboardInterrupt:
        if step != last_saved:
            path = save(step)
            print(f"\ninterrupted: saved {path}; continue with --resume")
        raise
    finally:
        bar.close()
    return latest_checkpoint(run_dir)
