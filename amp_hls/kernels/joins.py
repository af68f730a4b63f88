"""Joins of ``arity`` equal-tag inputs: Add, Mul (elementwise) and Concat (along width)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import GraphCore, Node
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig, SaturationCounter, narrow
from .base import (
    Emit,
    JoinBuffer,
    Kernel,
    Packed,
    TagCache,
    backward_msg,
    column_bounds,
    split_rows,
    stack_rows,
    tags_of,
)
from .common import check_grad, check_grads, check_inputs, exact_sum, stack_ports

FWD, BWD = Direction.FWD, Direction.BWD


class JoinKernel(Kernel):
    """Buffers one message per input until a tag is complete, then ``combine``s them."""

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.arity = node.n_inputs
        self.join = JoinBuffer(self, self.arity, f"{self.kind} join")

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        """Every tag completed by ``msgs`` in one ``combine`` call over row-stacked inputs."""
        check_inputs(self, port, msgs)
        joined = self.join.add(port, msgs)
        if joined is None:
            return []
        xs, offsets = stack_ports(self, joined)
        y = self.combine(xs, offsets, joined.tags, train)
        return self.emit_rows(0, joined.tags, FWD, y, offsets)

    def combine(self, xs: list[np.ndarray], offsets: Sequence[int], tags: list[Tag], train: bool) -> np.ndarray:
        """The output rows of the sets ``tags`` completed, from their stacked inputs ``xs``."""
        raise NotImplementedError

    def pending(self) -> int:
        return len(self.join)


class AddKernel(JoinKernel):
    """Elementwise sum (fixed: exact, saturated once); the gradient goes unchanged to each input."""

    kind = "add"

    def combine(self, xs: list[np.ndarray], offsets: Sequence[int], tags: list[Tag], train: bool) -> np.ndarray:
        return exact_sum(self, xs, self.numerics.data, "fwd")

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        if self.packed and type(msgs) is Packed:
            return [(i, msgs) for i in range(self.arity)]  # payloads are never written to
        return [(i, backward_msg(m.tag, m.payload)) for m in msgs for i in range(self.arity)]


class MulKernel(JoinKernel):
    """Elementwise product; ``dx_i = dy * prod_{j != i} x_j`` from the inputs cached per tag.

    Fixed point narrows after every pairwise product, in input order, forward and backward alike,
    so hardware needs one multiplier shape only.
    """

    kind = "mul"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.cache = TagCache(self, "mul cache")

    def combine(self, xs: list[np.ndarray], offsets: Sequence[int], tags: list[Tag], train: bool) -> np.ndarray:
        if train:  # per tag, its rows of every input
            self.cache.put_tags(tags, list(zip(*(split_rows(x, offsets) for x in xs))))
        return self._product(xs, "fwd")

    def _product(self, xs: list[np.ndarray], site: str) -> np.ndarray:
        y = xs[0]
        for x in xs[1:]:
            if self.fixed:
                f_d = self.numerics.data.frac
                y = narrow(y * x, f_d, self.numerics.data, self.counter, self.site(site))
            else:
                y = y * x
        return np.asarray(y, dtype=self.dtype)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        saved: list[list[np.ndarray]] = []
        for m in msgs:
            xs: list[np.ndarray] = self.cache.take(m.tag)  # type: ignore[assignment]
            check_grad(self, m, xs[0].shape)
            saved.append(xs)
        dy, offsets = stack_rows(msgs)
        # elementwise, so one product over the stacked rows equals the per-message ones
        xs = [x[0] if len(saved) == 1 else np.concatenate(x, axis=0) for x in zip(*saved)]
        out: list[Emit] = []
        tags = tags_of(msgs)
        for i in range(self.arity):
            others = self._product(xs[:i] + xs[i + 1 :], "bwd_prod")
            if self.fixed:
                f_d = self.numerics.data.frac
                dx = narrow(dy * others, f_d, self.numerics.grads, self.counter, self.site("bwd"))
            else:
                dx = (dy * others).astype(self.dtype, copy=False)
            out.extend(self.emit_rows(i, tags, BWD, dx, offsets))
        return out

    def pending(self) -> int:
        return len(self.join) + len(self.cache)


class ConcatKernel(JoinKernel):
    """Side by side in port order; backward cuts the gradient back into the input widths."""

    kind = "concat"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.bounds = column_bounds([s.width for s in self.in_specs])

    def combine(self, xs: list[np.ndarray], offsets: Sequence[int], tags: list[Tag], train: bool) -> np.ndarray:
        return np.hstack(xs)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        if self.packed and type(msgs) is Packed:
            dy, offsets, tags = msgs.rows, msgs.offsets, msgs.tags
            return [(i, Packed(tags, BWD, dy[:, lo:hi], offsets)) for i, (lo, hi) in enumerate(self.bounds)]
        return [
            (i, backward_msg(m.tag, m.payload[:, lo:hi]))
            for m in msgs
            for i, (lo, hi) in enumerate(self.bounds)
        ]
