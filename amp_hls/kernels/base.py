"""The kernel contract: how one node processes messages, in float or fixed point.

Kernels are the golden reference every other executor is held against, so each one spells its
arithmetic out with the rules of ``amp_hls.numerics`` and nothing else.

A kernel is driven by port:

- ``forward(port, msgs, train)``: ``msgs`` arrived at input ``port``;
- ``backward(port, msgs)``: gradients arrived at output ``port``.

Both return what the node emits, as ``(port, message)`` pairs: a forward message leaves by an
*output* port, a backward message by an *input* port (``message.direction`` says which). Batches
are lists so a kernel can process many waiting messages in one vectorised call (dynamic
batching); results must not depend on how messages are batched.

Every forward message a node receives in training is answered by exactly one backward message on
the same edge with the same tag (conservation); ``pending()`` counts what a kernel still holds
(cached activations, half-complete joins) and is zero when a run has finished cleanly.

An engine may switch a kernel to *packed* output (``Kernel.packed``): it then emits a whole batch
as one ``Packed`` (the tags, and the payload rows stacked in one array) instead of one message
per tag, and the next kernel takes that batch without stacking it again. Cutting a batch into
messages and stacking it back costs more than the arithmetic on the small payloads of dynamic
models; a ``Packed`` still reads as a sequence of messages, so any kernel takes either form.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from ..errors import KernelError
from ..ir import GraphCore, Node
from ..ir.nodes import EdgeSpec
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig, SaturationCounter

Emit = tuple[int, "Message | Packed"]


class Kernel:
    """Base class; subclasses set ``kind`` and override ``forward``/``backward``."""

    kind = ""
    # Per-message shape checks (``check_inputs``, ``check_grads``). An engine switches them off
    # for kernels whose every neighbour it runs itself, since those kernels' payloads are shaped
    # by construction; ``AMP_HLS_CHECKS=1`` keeps them on everywhere (debugging).
    checks = True
    # True where every forward and backward message is answered by exactly one message of the
    # same instance key and direction (the engine then skips its per-key bookkeeping).
    same_keys = False
    # Emit ``Packed`` batches (``emit_rows``); an engine turns it on where every route of the
    # kernel stays inside the engine, so messages leaving it are always plain messages.
    packed = False

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        self.node = node
        self.name = node.name
        self.numerics = numerics
        self.counter = counter if counter is not None else SaturationCounter()
        self.in_specs: list[EdgeSpec] = [graph.input_spec(node.name, i) for i in range(node.n_inputs)]
        self.out_specs: list[EdgeSpec] = [graph.spec(node.name, i) for i in range(node.n_outputs)]
        self.dtype = numerics.dtype
        self.fixed = numerics.fixed

    # the contract -----------------------------------------------------------------------------
    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        raise KernelError(f"node '{self.name}': a {self.kind} node receives no forward messages")

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        raise KernelError(f"node '{self.name}': a {self.kind} node receives no backward messages")

    def pending(self) -> int:
        """Entries still held (caches, join buffers); zero after a clean run."""
        return 0

    # helpers for subclasses -------------------------------------------------------------------
    def site(self, what: str) -> str:
        """Saturation-counter site name, e.g. ``fc1.fwd``."""
        return f"{self.name}.{what}"

    def zeros(self, rows: int, width: int) -> np.ndarray:
        return np.zeros((rows, width), dtype=self.dtype)

    def error(self, message: str) -> KernelError:
        return KernelError(f"node '{self.name}': {message}")

    def emit_rows(
        self, port: int, tags: list[Tag], direction: Direction, rows: np.ndarray, offsets: Sequence[int]
    ) -> list[Emit]:
        """Messages ``tags[i]`` with rows ``offsets[i]:offsets[i+1]`` of ``rows``, all leaving by
        ``port``: one ``Packed`` when packed output is on, else one message per tag."""
        if self.packed and len(tags) > 1:
            return [(port, Packed(tags, direction, rows, offsets))]
        return [
            (port, _new_tuple(Message, (tag, direction, part)))
            for tag, part in zip(tags, split_rows(rows, offsets))
        ]

    def check_payload(self, msg: Message, spec: EdgeSpec, port: int) -> None:
        """Reject a payload whose shape breaks the edge's spec (never silently reshape)."""
        p = msg.payload
        if p.ndim != 2 or p.shape[1] != spec.width or not 1 <= p.shape[0] <= spec.max_rows:
            raise self.error(
                f"in{port}: payload of shape {p.shape} does not fit {spec} (tag {msg.tag})"
            )


class Packed:
    """Messages of one direction travelling together: message ``i`` is ``tags[i]`` with the rows
    ``offsets[i]:offsets[i+1]`` of ``rows``. Reads as a sequence of ``Message``; ``stack_rows``
    hands its rows back without copying. Never holds fewer than two messages (a lone message
    travels as itself), so an engine tells a list of plain messages by its length alone."""

    __slots__ = ("tags", "direction", "rows", "offsets")

    def __init__(self, tags: list[Tag], direction: Direction, rows: np.ndarray, offsets: Sequence[int]):
        self.tags = tags
        self.direction = direction
        self.rows = rows
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.tags)

    def __getitem__(self, i: int) -> Message:
        o = self.offsets
        return _new_tuple(Message, (self.tags[i], self.direction, self.rows[o[i] : o[i + 1]]))

    def __iter__(self) -> Iterator[Message]:
        d = self.direction
        for tag, part in zip(self.tags, split_rows(self.rows, self.offsets)):
            yield _new_tuple(Message, (tag, d, part))

    def part(self, lo: int, hi: int) -> Sequence[Message]:
        """Messages ``lo:hi`` (a ``Packed`` again, or a list when fewer than two)."""
        if hi - lo < 2:
            return [self[i] for i in range(lo, hi)]
        o = self.offsets
        base = o[lo]
        return Packed(self.tags[lo:hi], self.direction, self.rows[base : o[hi]], [x - base for x in o[lo : hi + 1]])


def tags_of(msgs: Sequence[Message]) -> list[Tag]:
    """The tags of a batch, in order."""
    if type(msgs) is Packed:
        return msgs.tags
    return [m[0] for m in msgs]


def merge(items: Sequence[Message | Packed], direction: Direction) -> Sequence[Message]:
    """Waiting items (messages and ``Packed`` batches, in arrival order) as one batch: the
    list itself when it holds messages only, else one ``Packed`` (one ``np.concatenate``)."""
    if len(items) == 1 and type(items[0]) is Packed:
        return items[0]
    if not any(type(item) is Packed for item in items):
        return items  # type: ignore[return-value]
    return pack(items, direction)


def pack(items: Sequence[Message | Packed], direction: Direction) -> Packed:
    """Messages and ``Packed`` batches (at least two messages in all) as one ``Packed``."""
    tags: list[Tag] = []
    arrays: list[np.ndarray] = []
    offsets = [0]
    for item in items:
        if type(item) is Packed:
            tags.extend(item.tags)
            base = offsets[-1]
            offsets.extend([base + x for x in item.offsets[1:]] if base else item.offsets[1:])
            arrays.append(item.rows)
        else:
            tags.append(item[0])
            arrays.append(item[2])
            offsets.append(offsets[-1] + item[2].shape[0])
    return Packed(tags, direction, np.concatenate(arrays, axis=0), offsets)


class TagCache:
    """A dict keyed by tag that refuses duplicates and unknown keys, to catch conservation bugs."""

    def __init__(self, owner: Kernel, what: str):
        self.owner = owner
        self.what = what
        self.entries: dict[Tag, object] = {}

    def put(self, tag: Tag, value: object) -> None:
        if tag in self.entries:
            raise self.owner.error(f"{self.what}: tag {tag} is already in flight here")
        self.entries[tag] = value

    def put_all(self, msgs: Sequence[Message], values: Iterable[object]) -> None:
        """``put`` for every message's tag, in one dict update (a duplicate is still refused)."""
        self.put_tags(tags_of(msgs), values)

    def put_tags(self, tags: list[Tag], values: Iterable[object]) -> None:
        """``put`` for every tag, in one dict update (a duplicate is still refused)."""
        entries = self.entries
        if not entries.keys().isdisjoint(tags) or len(set(tags)) != len(tags):
            for tag, value in zip(tags, values):  # raises at the first duplicate
                self.put(tag, value)
        entries.update(zip(tags, values))

    def take_all(self, msgs: Sequence[Message]) -> list[object]:
        """``take`` for every message's tag."""
        pop = self.entries.pop
        try:
            return [pop(tag) for tag in tags_of(msgs)]
        except KeyError as exc:
            raise self.owner.error(f"{self.what}: no forward entry for tag {exc.args[0]}") from None

    def peek(self, tag: Tag) -> object | None:
        """The entry for ``tag`` without removing it (None when absent)."""
        return self.entries.get(tag)

    def take(self, tag: Tag) -> object:
        try:
            return self.entries.pop(tag)
        except KeyError:
            raise self.owner.error(f"{self.what}: no forward entry for tag {tag}") from None

    def __len__(self) -> int:
        return len(self.entries)


class Joined(NamedTuple):
    """The sets a join completed, in completion order: their tags, and per port the payloads of
    every set stacked, with the row offsets that cut them apart again."""

    tags: list[Tag]
    parts: list[np.ndarray]
    offsets: list[Sequence[int]]


class JoinBuffer:
    """Waits for one message per port with equal tags; ``add`` returns what it completed.

    Models whose instances move in lock step (a GGSNN, a batch of equal lists) send a join whole
    ``Packed`` batches with the same tags in the same order on every port. Such a batch waits
    whole, and when the last port's batch matches, the join completes in one go, its stacked
    rows used as they came. Anything else (a batch that does not match, plain messages) first
    spreads the waiting batches over per-tag slots and joins tag by tag; either way the sets
    complete in the same order with the same rows.
    """

    def __init__(self, owner: Kernel, arity: int, what: str = "join"):
        self.owner = owner
        self.arity = arity
        self.what = what
        # tag -> the payloads so far by port (None: still to come), then the count still to come
        self.slots: dict[Tag, list] = {}
        self.batches: dict[int, Packed] = {}  # port -> a whole batch waiting (equal tags on all)

    def add(self, port: int, msgs: Sequence[Message]) -> Joined | None:
        """Take ``msgs`` arriving at ``port``; the sets that completed, or None."""
        batches = self.batches
        if type(msgs) is Packed and not self.slots and port not in batches:
            if all(b.tags == msgs.tags for b in batches.values()):
                if len(batches) < self.arity - 1:
                    batches[port] = msgs
                    return None
                batches[port] = msgs
                self.batches = {}
                ports = [batches[i] for i in range(self.arity)]
                return Joined(msgs.tags, [b.rows for b in ports], [b.offsets for b in ports])
        if batches:
            self.batches = {}
            for waiting_port, batch in batches.items():  # in arrival order; none completes
                self._add_tags(waiting_port, batch)
        return self._add_tags(port, msgs)

    def _add_tags(self, port: int, msgs: Sequence[Message]) -> Joined | None:
        complete: list[tuple[Tag, list[np.ndarray]]] = []
        slots, arity = self.slots, self.arity
        if type(msgs) is Packed:
            arrivals: Iterable[tuple[Tag, np.ndarray]] = zip(msgs.tags, split_rows(msgs.rows, msgs.offsets))
        else:
            arrivals = [(m[0], m[2]) for m in msgs]
        for tag, payload in arrivals:
            slot = slots.get(tag)
            if slot is None:
                slot = slots[tag] = [None] * arity + [arity]
            elif slot[port] is not None:
                raise self.owner.error(f"{self.what}: second message for tag {tag} on port {port}")
            slot[port] = payload
            slot[-1] -= 1
            if not slot[-1]:
                del slots[tag]
                slot.pop()
                complete.append((tag, slot))
        if not complete:
            return None
        parts, offsets = [], []
        for i in range(arity):
            arrays = [payloads[i] for _, payloads in complete]
            parts.append(arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0))
            offsets.append([0, *accumulate(a.shape[0] for a in arrays)])
        return Joined([tag for tag, _ in complete], parts, offsets)

    def __len__(self) -> int:
        """Tags waiting for a port (batches waiting whole hold the same tags)."""
        return len(self.slots) + next((len(b) for b in self.batches.values()), 0)


_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level ``__new__``
_FWD, _BWD = Direction.FWD, Direction.BWD


def forward_msg(tag: Tag, payload: np.ndarray) -> Message:
    return _new_tuple(Message, (tag, _FWD, payload))


def backward_msg(tag: Tag, payload: np.ndarray) -> Message:
    return _new_tuple(Message, (tag, _BWD, payload))


def make_tag(key: int, state: tuple[int, ...]) -> Tag:
    """``Tag(key, state)``, fast: kernels that rewrite states build one per message."""
    return _new_tuple(Tag, (key, state))


def stack_rows(msgs: Sequence[Message]) -> tuple[np.ndarray, list[int]]:
    """All payload rows of ``msgs`` in one array, plus the row offsets to undo it with ``split_rows``."""
    if type(msgs) is Packed:
        return msgs.rows, msgs.offsets  # type: ignore[return-value]
    payloads = [m[2] for m in msgs]
    offsets = [0, *accumulate([p.shape[0] for p in payloads])]
    if len(payloads) == 1:
        return payloads[0], offsets
    return np.concatenate(payloads, axis=0), offsets


def split_rows(rows: np.ndarray, offsets: Sequence[int]) -> list[np.ndarray]:
    """Undo ``stack_rows``: one slice per message (views, no copies)."""
    n = len(offsets) - 1
    if offsets[-1] == n:  # one row each: iterate a (n, 1, width) view in C
        return list(rows.reshape(n, 1, -1))
    return [rows[a:b] for a, b in zip(offsets, offsets[1:])]


def column_bounds(widths: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, stop)`` column ranges of consecutive slices of the given widths."""
    bounds, start = [], 0
    for w in widths:
        bounds.append((start, start + w))
        start += w
    return bounds


class StalenessStats:
    """Histogram of parameter versions elapsed between a forward and its backward (docs/glossary.md, staleness)."""

    def __init__(self) -> None:
        self.histogram: Counter[int] = Counter()

    def record(self, versions_elapsed: int) -> None:
        self.histogram[versions_elapsed] += 1

    def record_all(self, versions_elapsed: list[int]) -> None:
        self.histogram.update(versions_elapsed)

    @property
    def count(self) -> int:
        return sum(self.histogram.values())

    @property
    def mean(self) -> float:
        n = self.count
        return sum(k * v for k, v in self.histogram.items()) / n if n else 0.0

    @property
    def max(self) -> int:
        return max(self.histogram, default=0)
