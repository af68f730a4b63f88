"""Optimizers that update one parameter node at a time, whenever that node decides (no barrier).

Each node keeps its own step count, so Adam's bias correction is per node: a node that has
updated ``t`` times uses ``1 - beta**t``, however often the other nodes have updated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import AmpHlsError, NonFiniteError

OPTIMIZERS = ("sgd", "momentum", "adam")
# the state each kind keeps per parameter tensor: arrays "<tensor>.<moment>" (checkpoints: opt/<node>/...)
MOMENTS = {"sgd": (), "momentum": ("v",), "adam": ("m", "v")}


@dataclass(frozen=True)
class OptimizerConfig:
    kind: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    clip: float | None = 5.0  # max L2 norm of one node's update gradient; None = no clipping

    def __post_init__(self) -> None:
        if self.kind not in OPTIMIZERS:
            raise AmpHlsError(f"unknown optimizer {self.kind!r}; use one of {', '.join(OPTIMIZERS)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise AmpHlsError(f"learning rate must be positive and finite, got {self.lr}")
        for name in ("momentum", "beta1", "beta2"):  # beta = 1 would divide by zero in bias correction
            if not 0 <= getattr(self, name) < 1:
                raise AmpHlsError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if not self.eps > 0:  # Adam divides by sqrt(v) + eps, and v is 0 for a zero gradient
            raise AmpHlsError(f"eps must be positive, got {self.eps}")
        if self.clip is not None and not self.clip > 0:  # a negative clip would flip the update
            raise AmpHlsError(f"clip must be positive or None (off), got {self.clip}")


class Optimizer:
    """Holds per-node optimizer state; ``step`` returns the node's new parameters."""

    def __init__(self, config: OptimizerConfig):
        self.config = config
        self.state: dict[str, dict[str, np.ndarray]] = {}
        self.steps: dict[str, int] = {}

    def step(
        self, node: str, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """One update of ``node`` from the mean gradients ``grads`` (float arrays)."""
        c = self.config
        grads = {k: np.asarray(g, dtype=np.float64) for k, g in grads.items()}
        for k, g in grads.items():  # clipping would turn an inf into NaN everywhere: stop first
            if not np.all(np.isfinite(g)):
                raise NonFiniteError(f"its {k} gradient holds NaN or inf at update "
                                     f"{self.steps.get(node, 0) + 1}: training diverged; lower the "
                                     f"learning rate (now {c.lr:g}) or keep clipping on (--clip)", node)
        if c.clip is not None:
            norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
            if norm > c.clip:
                grads = {k: g * (c.clip / norm) for k, g in grads.items()}
        t = self.steps.get(node, 0) + 1
        self.steps[node] = t
        state = self.state.setdefault(node, {})
        new = {}
        for k, p in params.items():
            g = grads[k]
            if c.kind == "sgd":
                update = g
            elif c.kind == "momentum":
                v = _moment(state, f"{k}.v", g)
                v *= c.momentum
                v += g
                update = v
            else:  # in place: the same operations in the same order, without the temporaries
                m = _moment(state, f"{k}.m", g)
                m *= c.beta1
                m += (1 - c.beta1) * g
                v = _moment(state, f"{k}.v", g)
                v *= c.beta2
                v += (1 - c.beta2) * g * g
                m_hat = m / (1 - c.beta1**t)
                v_hat = v / (1 - c.beta2**t)
                update = m_hat / (np.sqrt(v_hat) + c.eps)
            with np.errstate(over="ignore"):  # an overflow is reported below, naming the node
                new[k] = (p.astype(np.float64) - c.lr * update).astype(p.dtype)
            if not np.all(np.isfinite(new[k])):
                raise NonFiniteError(f"update {t} made its {k} NaN or inf (learning rate {c.lr:g}): "
                                     "training diverged; lower the learning rate (--lr)", node)
        return new

    # checkpoints: plain arrays and ints, never pickle ------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        return {f"opt/{node}/{k}": v for node, s in self.state.items() for k, v in s.items()}

    def load_state(self, arrays: dict[str, np.ndarray], steps: dict[str, int]) -> None:
        self.state = {}
        for name, value in arrays.items():
            _, node, key = name.split("/", 2)
            self.state.setdefault(node, {})[key] = np.array(value, dtype=np.float64)
        self.steps = dict(steps)


def _moment(state: dict[str, np.ndarray], name: str, like: np.ndarray) -> np.ndarray:
    """The moment array ``name`` of a node's state, created as zeros on the node's first step."""
    value = state.get(name)
    if value is None:
        value = state[name] = np.zeros_like(like)
    return value
