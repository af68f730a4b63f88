"""The message engine: routes messages between node kernels until nothing is left to do.

Every node has one inbox per (direction, port). A step picks a non-empty inbox and hands *all*
its waiting messages to the kernel in one call (dynamic batching), then routes what the kernel
emits: forward messages along the edge leaving the output port, backward messages back along the
edge feeding the input port. An instance (key) is finished when none of its messages waits in
any inbox; ``max_active_keys`` bounds how many are in flight at once.

The order in which inboxes are served is the only freedom an executor has; ``seed`` fixes it, so
a run is reproducible.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..errors import KernelError
from ..ir import Edge, GraphCore, Source
from ..kernels import Kernel, make_kernel
from ..message import Direction, Message, Tag
from ..numerics import FLOAT32, NumericConfig, SaturationCounter

InboxKey = tuple[str, Direction, int]  # (node, direction, port)


@dataclass
class NodeCounts:
    """Messages through one node, for the conservation check (design §4)."""

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
        self.outbox: list[tuple[Edge, Message]] = []  # messages for nodes outside this engine
        self.inboxes: dict[InboxKey, list[Message]] = {}
        self._ready: deque[InboxKey] = deque()
        self._in_flight: Counter[int] = Counter()  # key -> messages waiting in inboxes
        self.counts: dict[str, NodeCounts] = {name: NodeCounts() for name in self.kernels}
        self.stats = RunStats()
        self.order_rng = np.random.default_rng(seed + 1)  # serving order; checkpointed
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

    @property
    def idle(self) -> bool:
        """No message waits anywhere."""
        return not self._ready

    # running ----------------------------------------------------------------------------------
    def step(self) -> list[int]:
        """Serve one inbox; returns the keys that finished during this step."""
        if not self._ready:
            return []
        if len(self._ready) > 1:
            self._ready.rotate(-int(self.order_rng.integers(len(self._ready))))
        inbox = self._ready.popleft()
        node, direction, port = inbox
        waiting = self.inboxes[inbox]
        batch, rest = waiting[: self.max_batch], waiting[self.max_batch :]
        if rest:
            self.inboxes[inbox] = rest
            self._ready.append(inbox)
        else:
            del self.inboxes[inbox]
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
        self.stats.steps += 1
        self.stats.messages += len(batch)
        self.stats.batches[node] += 1
        self._deliver(node, emitted)
        finished = []
        in_flight = self._in_flight
        for msg in batch:
            key = msg.tag.key
            left = in_flight[key] - 1
            if left:
                in_flight[key] = left
            else:
                del in_flight[key]
                finished.append(key)
        return finished

    def run(self, max_steps: int = 10_000_000) -> list[int]:
        """Step until every inbox is empty; returns the keys that finished."""
        finished: list[int] = []
        for _ in range(max_steps):
            if not self._ready:
                return finished
            finished.extend(self.step())
        raise KernelError(f"engine did not settle within {max_steps} steps (a loop that never exits?)")

    def _deliver(self, node: str, emitted: Iterable[tuple[int, Message]]) -> None:
        fwd_route, bwd_route = self._fwd_route[node], self._bwd_route[node]
        inboxes, ready, in_flight = self.inboxes, self._ready, self._in_flight
        n_fwd = n_bwd = 0
        for port, msg in emitted:
            if msg.direction is Direction.FWD:
                n_fwd += 1
                inbox = fwd_route[port]
            else:
                n_bwd += 1
                inbox = bwd_route[port]
            if type(inbox) is Edge:
                self.outbox.append((inbox, msg))
                continue
            waiting = inboxes.get(inbox)  # type: ignore[arg-type]
            if waiting is None:
                inboxes[inbox] = [msg]  # type: ignore[index]
                ready.append(inbox)  # type: ignore[arg-type]
            else:
                waiting.append(msg)
            in_flight[msg.tag.key] += 1
        counts = self.counts[node]
        counts.fwd_out += n_fwd
        counts.bwd_out += n_bwd

    def _enqueue(self, inbox: InboxKey, msg: Message) -> None:
        waiting = self.inboxes.get(inbox)
        if waiting is None:
            self.inboxes[inbox] = [msg]
            self._ready.append(inbox)
        else:
            waiting.append(msg)
        self._in_flight[msg.tag.key] += 1

    # checks -----------------------------------------------------------------------------------
    def conservation_report(self) -> list[str]:
        """Problems that show a message was lost or duplicated; empty when all is well."""
        problems = []
        if self.inboxes:
            problems.append(f"{sum(map(len, self.inboxes.values()))} messages still waiting")
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

