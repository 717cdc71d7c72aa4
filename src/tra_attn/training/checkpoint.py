"""Training checkpoints: a directory per step, committed by an atomic rename.

``run/checkpoints/step_0000500/`` holds config.json + model.safetensors (``save_pretrained``),
train_config.json and train_state.pt (optimizer state, RNG state, step). A checkpoint is written to
a hidden temporary directory first and renamed into place only when complete, so a crash or Ctrl-C
never leaves a half-written checkpoint that ``latest_checkpoint`` would pick up. A write that fails (a full
disk, a read-only folder) removes its temporary directory and raises ``WriteFailed`` naming the checkpoint;
the checkpoints already written stay as they were.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import torch

from ..models import CONFIG_NAME, WEIGHTS_NAME, TransformerLM
from ..models.io import save_pretrained
from ..utils.atomic import usual_mode
from ..utils.dataclass_io import current_fields
from ..utils.os_errors import writing
from .config import VERSION as TRAIN_VERSION

TRAIN_CONFIG_NAME = "train_config.json"
TRAIN_STATE_NAME = "train_state.pt"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def _commit(run_dir: Path, step: int, write, keep: int, tmp: Path | None = None) -> Path:
    """Write checkpoint ``step`` with ``write(folder)`` into a hidden temporary folder (``tmp``, or a new
    one), rename it into place, then delete all but the newest ``keep`` checkpoints. An OS error raises
    ``WriteFailed`` once the temporary folder is removed."""
    final = Path(run_dir) / "checkpoints" / f"step_{step:07d}"
    with writing("checkpoint", final):
        tmp = tmp or new_checkpoint_folder(run_dir, step)
        try:
            write(tmp)
            if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a periodic save)
                shutil.rmtree(final)
            tmp.chmod(usual_mode(0o777))  # mkdtemp creates 0700
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def new_checkpoint_folder(run_dir: Path, step: int) -> Path:
    """A new hidden temporary folder for checkpoint ``step`` (removed on resume if never committed)."""
    root = Path(run_dir) / "checkpoints"
    with writing("checkpoint", root / f"step_{step:07d}"):
        root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".step_{step:07d}.", dir=root))


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: TransformerLM,
    train_config: dict,
    state: dict,
    keep: int = 2,
    weights: dict | None = None,
    tmp: Path | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically, then delete all but the newest ``keep`` checkpoints.

    ``weights`` replaces the model's own state dict (the full weights of a sharded model); ``tmp`` is a
    folder from ``new_checkpoint_folder`` that already holds other files (a sharded optimizer state).
    """

    def write(folder: Path) -> None:
        save_pretrained(model, folder, weights)
        (folder / TRAIN_CONFIG_NAME).write_text(json.dumps(train_config, indent=2, sort_keys=True))
        with open(folder / TRAIN_STATE_NAME, "wb") as file:  # torch.save to a path hides the OS error's errno
            torch.save(state, file)

    return _commit(run_dir, step, write, keep, tmp)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint directories of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its newest checkpoint); clear error otherwise."""
    path = Path(path)
    if (path / CONFIG_NAME).is_file() and (path / WEIGHTS_NAME).is_file():
        return path
    latest = latest_checkpoint(path)
    if latest is None:
        raise ValueError(
            f"checkpoint {path} not found; expected a checkpoint directory ({CONFIG_NAME} + {WEIGHTS_NAME}) "
            f"or a run directory with checkpoints/step_*/"
        )
    return latest


TRAIN_STATE_KEYS = ("optimizer", "rng", "step")


def load_train_state(checkpoint: Path) -> tuple[dict, dict]:
    """(train_config dict, train_state dict) of a checkpoint; ValueError if missing or corrupt.

    The state is loaded with ``weights_only=True``: a file that needs anything else is not a checkpoint
    of this library, and is refused without ever unpickling arbitrary objects.
    """
    checkpoint = Path(checkpoint)
    config_path, state_path = checkpoint / TRAIN_CONFIG_NAME, checkpoint / TRAIN_STATE_NAME
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"checkpoint {checkpoint}: {config_path.name} is missing or not valid JSON ({err})") from None
    current_fields("TrainConfig", config, TRAIN_VERSION, config_path)  # an earlier version: `tra upgrade` it
    if not state_path.is_file():
        raise ValueError(f"checkpoint {checkpoint}: {state_path.name} is missing; expected the training state")
    try:
        state = torch.load(state_path, map_location="cpu", weights_only=True)
    except Exception:  # truncated zip, foreign pickle (UnpicklingError), ...: never retry unsafely
        raise ValueError(
            f"checkpoint {checkpoint}: {state_path.name} is not a training state written by this library "
            f"(unreadable or truncated); expected the file that `tra train` saves"
        ) from None
    missing = [key for key in TRAIN_STATE_KEYS if not isinstance(state, dict) or key not in state]
    if missing:
        raise ValueError(
            f"checkpoint {checkpoint}: {state_path.name} lacks {missing}; expected a dict with {list(TRAIN_STATE_KEYS)}"
        )
    return config, state


def remove_interrupted_writes(run_dir: Path) -> list[Path]:
    """Delete the hidden temporary folders that a killed checkpoint write leaves behind; returns them."""
    root = Path(run_dir) / "checkpoints"
    stale = sorted(p for p in root.glob(".step_*") if p.is_dir()) if root.is_dir() else []
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale
