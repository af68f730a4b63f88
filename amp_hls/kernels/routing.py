"""Routing and control flow: Split, Broadcast, Cond, Phi, Isu. Payloads pass through unchanged
except where a split cuts them or a broadcast sums their gradients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Broadcast, Cond, GraphCore, Isu, IsuOp, Node, Split
from ..message import Message, Tag
from ..numerics import NumericConfig, SaturationCounter
from .base import (
    Emit,
    JoinBuffer,
    Kernel,
    TagCache,
    backward_msg,
    column_bounds,
    forward_msg,
    make_tag,
    split_rows,
)
from .common import check_grads, check_inputs, exact_sum, stack_ports

MEMO_LIMIT = 1 << 16  # states a Cond or Isu remembers before starting afresh


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
        complete = self.join.add(port, msgs)
        if not complete:
            return []
        dys, offsets = stack_ports(self, complete)
        dx = np.hstack(dys)
        return [(0, backward_msg(p[0].tag, part)) for p, part in zip(complete, split_rows(dx, offsets))]

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
        complete = self.join.add(port, msgs)
        if not complete:
            return []
        dys, offsets = stack_ports(self, complete)
        if self.index:
            dx = self.zeros(offsets[-1], dys[0].shape[1])
        else:
            dx = exact_sum(self, dys, self.numerics.grads, "bwd")
        return [(0, backward_msg(p[0].tag, part)) for p, part in zip(complete, split_rows(dx, offsets))]

    def pending(self) -> int:
        return len(self.join)


class CondKernel(Kernel):
    """Routes by a predicate on the state: ``out0`` when true, ``out1`` when false; stateless.

    The gradient comes back on the port the message left by, with the same tag, and goes up.
    """

    kind = "cond"
    same_keys = True
    node: Cond

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.ports: dict[tuple[int, ...], int] = {}  # state -> output port, memoised

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        ports = self.ports
        out: list[Emit] = []
        for m in msgs:
            state = m[0][1]
            taken = ports.get(state)
            if taken is None:
                taken = ports[state] = self._route(m.tag)
            out.append((taken, m))
        return out

    def _route(self, tag: Tag) -> int:
        if len(self.ports) >= MEMO_LIMIT:
            self.ports.clear()
        try:
            return 0 if self.node.predicate(tag.state) else 1
        except IndexError:
            raise self.error(
                f"predicate {self.node.predicate} reads a state word tag {tag} lacks"
            ) from None

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return [(0, m) for m in msgs]


class PhiKernel(Kernel):
    """Merges its inputs into one stream, remembering per tag (in training) the input it came by."""

    kind = "phi"
    same_keys = True

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
            self.cache.put_all(msgs, [port] * len(msgs))
        return [(0, m) for m in msgs]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return list(zip(self.cache.take_all(msgs), msgs))  # type: ignore[arg-type]

    def pending(self) -> int:
        return len(self.cache)


class IsuKernel(Kernel):
    """Invertible state update: forward applies ``ops`` in order, backward their inverses reversed.

    Nothing is cached: the backward recovers the forward's input tag from the output tag.
    """

    kind = "isu"
    same_keys = True
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
        # state -> updated state, memoised per direction: the update is a pure function of the
        # state, and an instance's messages revisit the same few states
        self.memo: tuple[dict[tuple[int, ...], tuple[int, ...]], ...] = ({}, {})

    def _update(self, tag: Tag, ops: tuple[IsuOp, ...], memo: dict) -> tuple[int, ...]:
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        state = tag.state
        try:
            for op in ops:
                state = op.apply(state)
        except ValueError as exc:
            raise self.error(f"state update of tag {tag} failed: {exc}") from None
        memo[tag.state] = state
        return state

    def _emit(self, msgs: Sequence[Message], direction: int) -> list[Emit]:
        ops = self.inverse if direction else self.node.ops
        memo = self.memo[direction]
        make = backward_msg if direction else forward_msg
        out: list[Emit] = []
        for m in msgs:
            tag = m[0]
            state = memo.get(tag[1])
            if state is None:
                state = self._update(tag, ops, memo)
            out.append((0, make(make_tag(tag[0], state), m[2])))
        return out

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        return self._emit(msgs, 0)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return self._emit(msgs, 1)
