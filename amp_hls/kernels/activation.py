"""Elementwise nonlinearities: exact in float, lookup tables in fixed point (docs/contracts.md, Numerics)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Activation, GraphCore, Node
from ..message import Direction, Message
from ..numerics import NumericConfig, SaturationCounter, activation_table, narrow, round_shift
from .base import Emit, Kernel, TagCache, split_rows, stack_rows, tags_of
from .common import check_grad, check_grads, check_inputs

FWD, BWD = Direction.FWD, Direction.BWD


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow for large ``|x|``."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


class ActivationKernel(Kernel):
    """relu / tanh / sigmoid over all rows of a batch at once (elementwise, so batching is free).

    The backward needs the input for relu and the output for tanh and sigmoid; that is what the
    cache holds per tag.
    """

    kind = "activation"
    same_keys = True
    node: Activation

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.fn = self.node.fn
        self.cache = TagCache(self, f"{self.fn} cache")
        self.table = (
            activation_table(self.fn, numerics.data) if self.fixed and self.fn != "relu" else None
        )

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        x, offsets = stack_rows(msgs)
        y = self._apply(x)
        if train:
            self.cache.put_all(msgs, split_rows(x if self.fn == "relu" else y, offsets))
        return self.emit_rows(0, tags_of(msgs), FWD, y, offsets)

    def _apply(self, x: np.ndarray) -> np.ndarray:
        if self.fn == "relu":
            return np.maximum(x, 0).astype(self.dtype, copy=False)
        if self.table is not None:
            return self.table.lookup(x)
        x = np.asarray(x, dtype=self.dtype)
        return np.tanh(x) if self.fn == "tanh" else _sigmoid(x)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        saved: list[np.ndarray] = self.cache.take_all(msgs)  # type: ignore[assignment]
        dy, splits = stack_rows(msgs)
        c = saved[0] if len(saved) == 1 else np.concatenate(saved, axis=0)
        if c.shape != dy.shape or [a.shape[0] for a in saved] != [b - a for a, b in zip(splits, splits[1:])]:
            for m, cached in zip(msgs, saved):  # raises, naming the first tag that does not fit
                check_grad(self, m, cached.shape)
        dx = self._derivative(c, dy)
        return self.emit_rows(0, tags_of(msgs), BWD, dx, splits)

    def _derivative(self, c: np.ndarray, dy: np.ndarray) -> np.ndarray:
        """``dx`` from the cached input (relu) or output (tanh, sigmoid) ``c``."""
        if self.fn == "relu":
            return np.where(c > 0, dy, 0).astype(self.dtype, copy=False)
        if not self.fixed:
            slope = 1 - c * c if self.fn == "tanh" else c * (1 - c)
            return (dy * slope).astype(self.dtype, copy=False)
        f_d = self.numerics.data.frac
        one = self.numerics.data.one
        if self.fn == "tanh":
            slope = one - round_shift(c * c, f_d)
        else:
            slope = round_shift(c * (one - c), f_d)
        return narrow(dy * slope, f_d, self.numerics.grads, self.counter, self.site("bwd"))

    def pending(self) -> int:
        return len(self.cache)
