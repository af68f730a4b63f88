"""Routing and control flow: Split, Broadcast, Cond, Phi, Isu. Payloads pass through unchanged
except where a split cuts them or a broadcast sums their gradients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Broadcast, Cond, GraphCore, Isu, IsuOp, Node, Split
from ..message import Message, Tag
from ..numerics import NumericConfig, SaturationCounter
from .base import Emit, JoinBuffer, Kernel, TagCache, backward_msg, column_bounds, forward_msg
from .common import check_grads, check_inputs, exact_sum, same_rows


class SplitKernel(Kernel):
    """Cuts the width into ``sizes``; backward waits for every slice's gradient and rejoins them."""

    kind = "split"
    node: Split

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.bounds = column_bounds(self.node.sizes)
        self.join = JoinBuffer(self, len(self.node.sizes), "split gradient join")

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        return [
            (i, forward_msg(m.tag, m.payload[:, lo:hi]))
            for m in msgs
            for i, (lo, hi) in enumerate(self.bounds)
        ]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        out: list[Emit] = []
        for parts in self.join.add(port, msgs):
            same_rows(self, parts)
            out.append((0, backward_msg(parts[0].tag, np.hstack([m.payload for m in parts]))))
        return out

    def pending(self) -> int:
        return len(self.join)


class BroadcastKernel(Kernel):
    """Copies to every output; backward sums the ``arity`` gradients (fixed: exact, saturated once).

    An index edge carries no gradient, so its sum is zeros whatever arrives.
    """

    kind = "broadcast"
    node: Broadcast

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.join = JoinBuffer(self, self.node.arity, "broadcast gradient join")
        self.index = self.in_specs[0].dtype == "index"

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        return [(i, forward_msg(m.tag, m.payload)) for m in msgs for i in range(self.node.arity)]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        out: list[Emit] = []
        for parts in self.join.add(port, msgs):
            rows = same_rows(self, parts)
            if self.index:
                dx = self.zeros(rows, parts[0].width)
            else:
                dx = exact_sum(self, [m.payload for m in parts], self.numerics.grads, "bwd")
            out.append((0, backward_msg(parts[0].tag, dx)))
        return out

    def pending(self) -> int:
        return len(self.join)


class CondKernel(Kernel):
    """Routes by a predicate on the state: ``out0`` when true, ``out1`` when false; stateless.

    The gradient comes back on the port the message left by, with the same tag, and goes up.
    """

    kind = "cond"
    node: Cond

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            try:
                taken = self.node.predicate(m.tag.state)
            except IndexError:
                raise self.error(
                    f"predicate {self.node.predicate} reads a state word tag {m.tag} lacks"
                ) from None
            out.append((0 if taken else 1, m))
        return out

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return [(0, m) for m in msgs]


class PhiKernel(Kernel):
    """Merges its inputs into one stream, remembering per tag (in training) the input it came by."""

    kind = "phi"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.cache = TagCache(self, "phi origin")

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        if train:
            for m in msgs:
                self.cache.put(m.tag, port)
        return [(0, m) for m in msgs]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return [(self.cache.take(m.tag), m) for m in msgs]  # type: ignore[misc]

    def pending(self) -> int:
        return len(self.cache)


class IsuKernel(Kernel):
    """Invertible state update: forward applies ``ops`` in order, backward their inverses reversed.

    Nothing is cached: the backward recovers the forward's input tag from the output tag.
    """

    kind = "isu"
    node: Isu

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.inverse = tuple(op.inverse() for op in reversed(self.node.ops))

    def _update(self, tag: Tag, ops: tuple[IsuOp, ...]) -> Tag:
        state = tag.state
        try:
            for op in ops:
                state = op.apply(state)
        except ValueError as exc:
            raise self.error(f"state update of tag {tag} failed: {exc}") from None
        return tag.with_state(state)

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        return [(0, forward_msg(self._update(m.tag, self.node.ops), m.payload)) for m in msgs]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return [(0, backward_msg(self._update(m.tag, self.inverse), m.payload)) for m in msgs]
