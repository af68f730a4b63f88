"""The numpy CPU runtime: the message engine (and, built on it, the trainer)."""

from .engine import Engine, NodeCounts, RunStats
from .optim import Optimizer, OptimizerConfig
from .trainer import TrainConfig, Trainer

__all__ = ["Engine", "NodeCounts", "Optimizer", "OptimizerConfig", "RunStats", "TrainConfig", "Trainer"]
