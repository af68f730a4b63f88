"""The numpy CPU runtime: the message engine (and, built on it, the trainer)."""

from .engine import Engine, NodeCounts, RunStats

__all__ = ["Engine", "NodeCounts", "RunStats"]
