"""The message engine: routes messages between node kernels until nothing is left to do.

Every node has one inbox per (direction, port). A step picks a non-empty inbox and hands *all*
its waiting messages to the kernel in one call (dynamic batching), then routes what the kernel
emits: forward messages along the edge leaving the output port, backward messages back along the
edge feeding the input port. An instance (key) is finished when none of its messages waits in
any inbox; ``max_active_keys`` bounds how many are in flight at once.

The order in which inboxes are served is the only freedom an executor has. The engine serves the
fullest inbox first (the oldest among equally full ones), so waiting messages pile up into large
batches instead of trickling through one kernel call each: per-call Python overhead, not
arithmetic, bounds this runtime. The order is deterministic, so a run is reproducible.

Kernels whose every route stays inside the engine emit whole batches as ``Packed`` (stacked
rows, see ``kernels.base``); an inbox holds messages and such batches in arrival order and is
served as one batch. Packing changes no batch and no arithmetic, only the Python work of
cutting and re-stacking payloads (``packed=False`` runs the same steps message by message).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import KernelError
from ..ir import Edge, GraphCore, Source
from ..kernels import Kernel
from ..kernels.base import Packed, merge, tags_of
from ..kinds import make_kernel
from ..message import Direction, Message, Tag
from ..numerics import FLOAT32, NumericConfig, SaturationCounter

InboxKey = tuple[str, Direction, int]  # (node, direction, port)


@dataclass
class NodeCounts:
    """Messages through one node, for the conservation check (docs/contracts.md, IR)."""

    fwd_in: int = 0
    fwd_out: int = 0
    bwd_in: int = 0
    bwd_out: int = 0


@dataclass
class RunStats:
    steps: int = 0
    messages: int = 0
    batches: Counter[str] = field(default_factory=Counter)  # node -> kernel calls


class Engine:
    """Executes a validated graph with numpy kernels, many instances in flight."""

    def __init__(
        self,
        graph: GraphCore,
        numerics: NumericConfig = FLOAT32,
        seed: int = 0,
        train: bool = True,
        max_batch: int = 256,
        members: Collection[str] | None = None,
        packed: bool = True,
    ):
        graph.validate()
        self.graph = graph
        # The nodes this engine runs; edges to any other node leave through ``outbox`` (a host
        # engine and a device each run their part of a placed graph).
        self.members = set(graph.nodes) if members is None else set(members)
        self.numerics = numerics
        self.train = train
        self.max_batch = max_batch
        self.counter = SaturationCounter()
        init_rng = np.random.default_rng(seed)
        self.kernels: dict[str, Kernel] = {
            name: make_kernel(node, graph, numerics, self.counter, init_rng)
            for name, node in graph.nodes.items()
            if name in self.members
        }
        self.sources = [n for n, k in self.kernels.items() if isinstance(k.node, Source)]
        # Where each emitted message goes: node -> port -> inbox (or the Edge, when it leaves
        # this engine), precomputed for speed.
        self._fwd_route: dict[str, list[InboxKey | Edge]] = {n: [] for n in self.kernels}
        self._bwd_route: dict[str, list[InboxKey | Edge]] = {n: [] for n in self.kernels}
        for name in self.kernels:
            node = graph.nodes[name]
            for i in range(node.n_outputs):
                edge = graph.edge_from(name, i)
                assert edge is not None
                inside = edge.dst.node in self.members
                self._fwd_route[name].append((edge.dst.node, Direction.FWD, edge.dst.index) if inside else edge)
            for i in range(node.n_inputs):
                edge = graph.edge_into(name, i)
                assert edge is not None
                inside = edge.src.node in self.members
                self._bwd_route[name].append((edge.src.node, Direction.BWD, edge.src.index) if inside else edge)
        for name, kernel in self.kernels.items():
            leaves = any(type(r) is Edge for r in self._fwd_route[name] + self._bwd_route[name])
            kernel.packed = packed and not leaves  # the outbox takes plain messages only
            if os.environ.get("AMP_HLS_CHECKS", "") != "1":
                kernel.checks = leaves  # see ``Kernel.checks``
        # Per node, indexed by direction then port (a list lookup per emitted message).
        self._routes = {n: (self._fwd_route[n], self._bwd_route[n]) for n in self.kernels}
        self.outbox: list[tuple[Edge, Message]] = []  # messages for nodes outside this engine
        # Non-empty inboxes only, oldest first: the keys are the inboxes ready to serve. An
        # inbox holds messages and ``Packed`` batches; ``_sizes`` counts its messages (same order).
        self.inboxes: dict[InboxKey, list[Message | Packed]] = {}
        self._sizes: dict[InboxKey, int] = {}
        self._in_flight: Counter[int] = Counter()  # key -> messages waiting in inboxes
        self.counts: dict[str, NodeCounts] = {name: NodeCounts() for name in self.kernels}
        self.stats = RunStats()
        # Nodes whose kernel answers every message with one message of the same key and
        # direction, all kept inside this engine: serving them leaves every key's in-flight
        # count as it was.
        self._same_keys = {
            n for n, k in self.kernels.items()
            if k.same_keys and not any(type(r) is Edge for r in self._fwd_route[n] + self._bwd_route[n])
        }
        self.on_backward: Callable[[Kernel], None] | None = None  # e.g. apply updates every muf

    # feeding ----------------------------------------------------------------------------------
    def inject(self, key: int, inputs: dict[str, tuple[tuple[int, ...], np.ndarray]]) -> None:
        """Start instance ``key``: every source emits its ``(state, payload)``."""
        missing = set(self.sources) - set(inputs)
        if missing:
            raise KernelError(f"instance {key} gives no data for source(s) {sorted(missing)}")
        for name in self.sources:
            state, payload = inputs[name]
            msg = Message(Tag(key, tuple(state)), Direction.FWD, np.asarray(payload))
            self._deliver(name, self.kernels[name].forward(0, [msg], self.train))

    def receive(self, edge: Edge, msg: Message) -> None:
        """A message arriving over ``edge`` from outside: forward to its consumer, backward to its producer."""
        if msg.direction is Direction.FWD:
            inbox: InboxKey = (edge.dst.node, Direction.FWD, edge.dst.index)
        else:
            inbox = (edge.src.node, Direction.BWD, edge.src.index)
        if inbox[0] not in self.kernels:
            raise KernelError(f"message for node '{inbox[0]}', which this engine does not run")
        self._enqueue(inbox, msg)

    def take_outbox(self) -> list[tuple[Edge, Message]]:
        out, self.outbox = self.outbox, []
        return out

    @property
    def active_keys(self) -> int:
        return len(self._in_flight)

    def is_active(self, key: int) -> bool:
        return key in self._in_flight

    def inbox_sizes(self) -> dict[InboxKey, int]:
        """Messages waiting per non-empty inbox."""
        return dict(self._sizes)

    @property
    def idle(self) -> bool:
        """No message waits anywhere."""
        return not self.inboxes

    # running ----------------------------------------------------------------------------------
    def step(self) -> list[int]:
        """Serve the fullest inbox; returns the keys that finished during this step."""
        inboxes = self.inboxes
        if not inboxes:
            return []
        inbox = self._pick()
        node, direction, port = inbox
        waiting = inboxes.pop(inbox)
        n = self._sizes.pop(inbox)
        batch = waiting if len(waiting) == n else merge(waiting, direction)
        if n > self.max_batch:
            rest = batch.part(self.max_batch, n) if type(batch) is Packed else batch[self.max_batch :]
            batch = batch.part(0, self.max_batch) if type(batch) is Packed else batch[: self.max_batch]
            inboxes[inbox] = [rest] if type(rest) is Packed else rest  # back of the queue
            self._sizes[inbox] = n - self.max_batch
        kernel = self.kernels[node]
        counts = self.counts[node]
        if direction is Direction.FWD:
            counts.fwd_in += len(batch)
            emitted = kernel.forward(port, batch, self.train)
        else:
            counts.bwd_in += len(batch)
            emitted = kernel.backward(port, batch)
            if self.on_backward is not None:
                self.on_backward(kernel)
        stats = self.stats
        stats.steps += 1
        stats.messages += len(batch)
        stats.batches[node] += 1
        if node in self._same_keys:
            self._deliver(node, emitted, track_keys=False)
            return []
        self._deliver(node, emitted)
        finished = []
        in_flight = self._in_flight
        for tag in tags_of(batch):
            key = tag[0]
            left = in_flight[key] - 1
            if left:
                in_flight[key] = left
            else:
                del in_flight[key]
                finished.append(key)
        return finished

    def _pick(self) -> InboxKey:
        """The fullest inbox; the oldest among equally full ones."""
        sizes = self._sizes
        if len(sizes) == 1:
            return next(iter(sizes))
        counts = list(sizes.values())
        return list(sizes)[counts.index(max(counts))]

    def run(self, max_steps: int = 10_000_000) -> list[int]:
        """Step until every inbox is empty; returns the keys that finished."""
        finished: list[int] = []
        for _ in range(max_steps):
            if not self.inboxes:
                return finished
            finished.extend(self.step())
        raise KernelError(f"engine did not settle within {max_steps} steps (a loop that never exits?)")

    def _deliver(self, node: str, emitted: Iterable[tuple[int, Message | Packed]], track_keys: bool = True) -> None:
        """Put what ``node`` emitted into the inboxes it goes to (plain messages for nodes outside
        the engine into the outbox); ``track_keys`` counts them per key in flight, which a
        ``_same_keys`` node can skip: it changes no key's count."""
        routes = self._routes[node]
        inboxes, sizes = self.inboxes, self._sizes
        keys: list[int] = []
        add_key = keys.append
        n_bwd = n = 0
        for port, item in emitted:
            if type(item) is Packed:
                size = len(item.tags)
                direction = item.direction
                inbox = routes[direction][port]
                if track_keys:
                    keys.extend([tag[0] for tag in item.tags])
            else:
                size = 1
                direction = item[1]
                inbox = routes[direction][port]
                if type(inbox) is Edge:  # only plain messages leave: see ``Kernel.packed``
                    self.outbox.append((inbox, item))
                    n += 1
                    n_bwd += direction
                    continue
                if track_keys:
                    add_key(item[0][0])
            n += size
            n_bwd += size * direction
            waiting = inboxes.get(inbox)  # type: ignore[arg-type]
            if waiting is None:
                inboxes[inbox] = [item]  # type: ignore[index]
                sizes[inbox] = size  # type: ignore[index]
            else:
                waiting.append(item)
                sizes[inbox] += size  # type: ignore[index]
        if keys:
            self._in_flight.update(keys)  # counts in C
        counts = self.counts[node]
        counts.fwd_out += n - n_bwd
        counts.bwd_out += n_bwd

    def _enqueue(self, inbox: InboxKey, msg: Message) -> None:
        waiting = self.inboxes.get(inbox)
        if waiting is None:
            self.inboxes[inbox] = [msg]
            self._sizes[inbox] = 1
        else:
            waiting.append(msg)
            self._sizes[inbox] += 1
        self._in_flight[msg.tag.key] += 1

    # checks -----------------------------------------------------------------------------------
    def conservation_report(self) -> list[str]:
        """Problems that show a message was lost or duplicated; empty when all is well."""
        problems = []
        if self.inboxes:
            problems.append(f"{sum(self._sizes.values())} messages still waiting")
        if self.outbox:
            problems.append(f"{len(self.outbox)} outgoing messages never collected")
        for name, kernel in self.kernels.items():
            held = kernel.pending()
            if held:
                problems.append(f"node '{name}' still holds {held} entries")
            c = self.counts[name]
            if self.train and c.fwd_in != c.bwd_out:
                problems.append(f"node '{name}': {c.fwd_in} forward in but {c.bwd_out} backward out")
            if self.train and c.fwd_out != c.bwd_in:
                problems.append(f"node '{name}': {c.fwd_out} forward out but {c.bwd_in} backward in")
        return problems

