"""Routing and control flow: Split, Broadcast, Cond, Phi, Isu. Payloads pass through unchanged
except where a split cuts them or a broadcast sums their gradients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Broadcast, Cond, GraphCore, Isu, IsuOp, Node, Split
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig, SaturationCounter
from .base import (
    Emit,
    JoinBuffer,
    Kernel,
    Packed,
    TagCache,
    backward_msg,
    column_bounds,
    forward_msg,
    make_tag,
    pack,
    tags_of,
)
from .common import check_grads, check_inputs, exact_sum, stack_ports

FWD, BWD = Direction.FWD, Direction.BWD
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
        if self.packed and type(msgs) is Packed:
            x, offsets, tags = msgs.rows, msgs.offsets, msgs.tags
            return [(i, Packed(tags, FWD, x[:, lo:hi], offsets)) for i, (lo, hi) in enumerate(self.bounds)]
        return [
            (i, forward_msg(m.tag, m.payload[:, lo:hi]))
            for m in msgs
            for i, (lo, hi) in enumerate(self.bounds)
        ]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        joined = self.join.add(port, msgs)
        if joined is None:
            return []
        dys, offsets = stack_ports(self, joined)
        return self.emit_rows(0, joined.tags, BWD, np.hstack(dys), offsets)

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
        if self.packed and type(msgs) is Packed:
            return [(i, msgs) for i in range(self.node.arity)]  # payloads are never written to
        return [(i, forward_msg(m.tag, m.payload)) for m in msgs for i in range(self.node.arity)]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        joined = self.join.add(port, msgs)
        if joined is None:
            return []
        dys, offsets = stack_ports(self, joined)
        if self.index:
            dx = self.zeros(offsets[-1], dys[0].shape[1])
        else:
            dx = exact_sum(self, dys, self.numerics.grads, "bwd")
        return self.emit_rows(0, joined.tags, BWD, dx, offsets)

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
        taken = []
        for tag in tags_of(msgs):
            p = ports.get(tag[1])
            if p is None:
                p = ports[tag[1]] = self._route(tag)
            taken.append(p)
        if self.packed and type(msgs) is Packed and taken.count(taken[0]) == len(taken):
            return [(taken[0], msgs)]  # the whole batch takes one way
        return list(zip(taken, msgs))

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
        if self.packed and type(msgs) is Packed:
            return [(0, msgs)]
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
        if self.packed and len(msgs) > 1:
            # Where messages enter a loop (from sources, one per instance), stack them once, so
            # the loop and the joins inside it see whole batches.
            return [(0, msgs if type(msgs) is Packed else pack(msgs, FWD))]
        return [(0, m) for m in msgs]

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        origins: list[int] = self.cache.take_all(msgs)  # type: ignore[assignment]
        if self.packed and type(msgs) is Packed and origins.count(origins[0]) == len(origins):
            return [(origins[0], msgs)]  # the whole batch came by one input
        return list(zip(origins, msgs))  # type: ignore[arg-type]

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
        tags = []
        for tag in tags_of(msgs):
            state = memo.get(tag[1])
            if state is None:
                state = self._update(tag, ops, memo)
            tags.append(make_tag(tag[0], state))
        if self.packed and type(msgs) is Packed:  # the payloads go on untouched
            return [(0, Packed(tags, msgs.direction, msgs.rows, msgs.offsets))]
        make = backward_msg if direction else forward_msg
        return [(0, make(tag, m[2])) for tag, m in zip(tags, msgs)]

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        return self._emit(msgs, 0)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        return self._emit(msgs, 1)
