"""Kernels that move rows between messages: Ungroup, Group, Aggregate (message passing), RowSum."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate

import numpy as np

from ..ir import GraphCore, Group, Node
from ..message import MAX_STATE_WORDS, Direction, Message, Tag
from ..numerics import NumericConfig, Precision, SaturationCounter, saturate
from .base import (
    Emit,
    JoinBuffer,
    Kernel,
    TagCache,
    backward_msg,
    forward_msg,
    make_tag,
    split_rows,
    stack_rows,
    tags_of,
)
from .common import check_grad, check_grads, check_inputs, index_rows

FWD, BWD = Direction.FWD, Direction.BWD


def _split_index(kernel: Kernel, tag: Tag) -> tuple[Tag, int, int]:
    """``(parent tag, i, n)`` of a row message whose state ends in ``(i, n)``."""
    state = tag[1]
    if len(state) < 2:
        raise kernel.error(f"tag {tag} does not end in a row index (i, n)")
    i, n = state[-2:]
    if not 0 <= i < n:
        raise kernel.error(f"tag {tag}: row index {i} outside [0, {n})")
    return make_tag(tag[0], state[:-2]), i, n


def _row_msgs(make: Callable[[Tag, np.ndarray], Message], parent: Tag, rows: np.ndarray) -> list[Emit]:
    """One message per row of ``rows``, tagged ``parent`` with ``(i, n)`` pushed on its state."""
    key, state = parent
    n = rows.shape[0]
    return [(0, make(make_tag(key, state + (i, n)), rows[i : i + 1])) for i in range(n)]


class _RowGather:
    """Collects ``n`` single-row messages per parent tag; hands back the full ``n``-row payload."""

    def __init__(self, owner: Kernel, what: str, max_rows: int):
        self.owner = owner
        self.what = what
        self.max_rows = max_rows
        self.slots: dict[Tag, list[np.ndarray | None]] = {}
        self.missing: dict[Tag, int] = {}  # rows still to come, so completion is O(1) per row

    def add(self, msg: Message, index: tuple[Tag, int, int] | None = None) -> tuple[Tag, np.ndarray] | None:
        """Add one row message (``index``: its ``_split_index``, if the caller has it already)."""
        parent, i, n = index if index is not None else _split_index(self.owner, msg.tag)
        slots = self.slots.get(parent)
        if slots is None:
            if n > self.max_rows:
                raise self.owner.error(f"{self.what}: tag {msg.tag} says {n} rows, beyond {self.max_rows}")
            slots = self.slots[parent] = [None] * n
            self.missing[parent] = n
        elif len(slots) != n:
            raise self.owner.error(f"{self.what}: tag {msg.tag} says {n} rows, earlier ones {len(slots)}")
        if slots[i] is not None:
            raise self.owner.error(f"{self.what}: second message for row {i} of tag {parent}")
        slots[i] = msg[2]
        left = self.missing[parent] - 1
        if left:
            self.missing[parent] = left
            return None
        del self.slots[parent], self.missing[parent]
        return parent, np.concatenate(slots, axis=0)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.slots)


class UngroupKernel(Kernel):
    """One message per row, ``(i, n)`` pushed on the state; backward regathers the row gradients.

    In training the forward remembers each parent tag, so a row gradient of an instance never
    ungrouped here is caught rather than gathered forever.
    """

    kind = "ungroup"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.cache = TagCache(self, "ungroup rows")
        self.gather = _RowGather(self, "ungroup gradient gather", self.in_specs[0].max_rows)

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            if len(m.tag.state) + 2 > MAX_STATE_WORDS:
                raise self.error(f"tag {m.tag} has no room for a row index ({MAX_STATE_WORDS} words)")
            if train:
                self.cache.put(m.tag, m.rows)
            out.extend(_row_msgs(forward_msg, m.tag, m.payload))
        return out

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        out: list[Emit] = []
        gathering = self.gather.slots
        for m in msgs:
            index = parent, _, n = _split_index(self, m.tag)
            # the first row of a parent checks the forward; later ones must agree with the first
            if parent not in gathering and self.cache.peek(parent) != n:
                raise self.error(f"no forward of {n} rows for tag {parent} (row gradient {m.tag})")
            done = self.gather.add(m, index)
            if done is not None:
                self.cache.take(parent)
                out.append((0, backward_msg(*done)))
        return out

    def pending(self) -> int:
        return len(self.cache) + len(self.gather)


class GroupKernel(Kernel):
    """Gathers the ``n`` row messages of a parent tag into one; backward splits the gradient."""

    kind = "group"
    node: Group

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.cache = TagCache(self, "group rows")
        self.gather = _RowGather(self, "group gather", self.node.max_rows)

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            done = self.gather.add(m)
            if done is not None:
                if train:
                    self.cache.put(done[0], done[1].shape[0])
                out.append((0, forward_msg(*done)))
        return out

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            n: int = self.cache.take(m.tag)  # type: ignore[assignment]
            check_grad(self, m, (n, m.width))
            out.extend(_row_msgs(backward_msg, m.tag, m.payload))
        return out

    def pending(self) -> int:
        return len(self.cache) + len(self.gather)


class AggregateKernel(Kernel):
    """``out[dst] += x[src]`` over the instance's edges; backward ``dx[src] += dy[dst]``.

    Fixed point sums exactly in int64 and saturates once. The edge rows get a zero gradient.
    """

    kind = "aggregate"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.join = JoinBuffer(self, 2, "aggregate join")
        self.cache = TagCache(self, "aggregate edges")

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        joined = self.join.add(port, msgs)
        if joined is None:
            return []
        tags = joined.tags
        v, edges = joined.parts
        offsets, edge_offsets = joined.offsets
        edges = index_rows(self, edges, tags, 1)
        counts = np.diff(edge_offsets)
        if edges.size and (edges.min() < 0 or (edges.max(axis=1) >= np.repeat(np.diff(offsets), counts)).any()):
            for k, tag in enumerate(tags):  # names the first message at fault
                n, e = offsets[k + 1] - offsets[k], edges[edge_offsets[k] : edge_offsets[k + 1]]
                if e.size and (e.min() < 0 or e.max() >= n):
                    raise self.error(f"edge endpoint outside [0, {n}) (tag {tag})")
        if train:
            rows = [b - a for a, b in zip(offsets, offsets[1:])]
            self.cache.put_tags(tags, list(zip(split_rows(edges, edge_offsets), rows)))
        y = self._scatter(v, offsets, edges, counts, 0, self.numerics.data, "fwd")
        return self.emit_rows(0, tags, FWD, y, offsets)

    def _scatter(
        self, v: np.ndarray, offsets: Sequence[int], edges: np.ndarray, counts: np.ndarray,
        src_col: int, prec: Precision, site: str,
    ) -> np.ndarray:
        """Per message, ``out[dst[k]] += v[src[k]]`` over its edges (``src`` in column
        ``src_col``; ``counts``: edges per message), in the mode's arithmetic: one scatter-add
        for the whole batch, the edges shifted by each message's first row (the sums stay per
        message and in edge order, so the result does not depend on batching)."""
        if len(counts) > 1:
            edges = edges + np.repeat(np.asarray(offsets[:-1]), counts)[:, None]
        acc = np.zeros((offsets[-1], v.shape[1]), dtype=self.dtype)
        np.add.at(acc, edges[:, 1 - src_col], v[edges[:, src_col]])
        if self.fixed:
            acc = saturate(acc, prec, self.counter, self.site(site))
        return acc

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        all_edges, rows = zip(*self.cache.take_all(msgs))  # type: ignore[call-overload]
        dy, offsets = stack_rows(msgs)
        if list(rows) != [b - a for a, b in zip(offsets, offsets[1:])] or dy.shape[1] != self.out_specs[0].width:
            for m, n in zip(msgs, rows):  # names the first message at fault
                check_grad(self, m, (n, self.out_specs[0].width))
        counts = np.array([e.shape[0] for e in all_edges])
        edges = all_edges[0] if len(all_edges) == 1 else np.concatenate(all_edges, axis=0)
        dx = self._scatter(dy, offsets, edges, counts, 1, self.numerics.grads, "bwd")
        tags = tags_of(msgs)
        edge_offsets = [0, *accumulate(counts.tolist())]
        return [
            *self.emit_rows(0, tags, BWD, dx, offsets),
            *self.emit_rows(1, tags, BWD, self.zeros(edge_offsets[-1], 2), edge_offsets),
        ]

    def pending(self) -> int:
        return len(self.join) + len(self.cache)


class RowSumKernel(Kernel):
    """Readout: the sum of the rows (fixed: exact, saturated once); backward repeats the gradient."""

    kind = "rowsum"
    same_keys = True

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.cache = TagCache(self, "rowsum rows")

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            y = m.payload.sum(axis=0, keepdims=True)
            if self.fixed:
                y = saturate(y, self.numerics.data, self.counter, self.site("fwd"))
            if train:
                self.cache.put(m.tag, m.rows)
            out.append((0, forward_msg(m.tag, y.astype(self.dtype, copy=False))))
        return out

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        out: list[Emit] = []
        for m in msgs:
            n: int = self.cache.take(m.tag)  # type: ignore[assignment]
            out.append((0, backward_msg(m.tag, np.repeat(m.payload, n, axis=0))))
        return out

    def pending(self) -> int:
        return len(self.cache)
