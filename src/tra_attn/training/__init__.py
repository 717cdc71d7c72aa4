"""Training: config, the task-agnostic loop, optimiser and schedule, checkpoints, evaluation of runs."""

from .config import TrainConfig
from .loop import train

__all__ = ["TrainConfig", "train"]
