"""Drives a placed graph: host nodes on the numpy engine, device nodes behind a ``Device``.

The loop admits instances while fewer than ``mak`` are in flight, runs the host part until it
settles, ships what crosses the boundary to the device as wire messages, and routes what comes
back: DATA to the host nodes, GRADS to ``on_grads`` (the parameter server, or a test), LOSS (a
device Loss node's report of an instance) to the loss records ``drain_losses`` hands out with the
host losses' (``device_losses``).

Faults: a device with a control channel (``amp_hls.control``) is asked for its status when it
stops answering and, with ``check_status``, at the end of every ``run``; error flags become a
``DeviceError`` naming the kernels. ``abandon`` drops the instances in flight (after the
device's soft reset has dropped their messages there), so a run can go on with both sides empty.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from ..control import is_stats, parse_stats
from ..design import dx_skipped
from ..ir import Edge, Loss
from ..kernels.host import LossKernel, LossRecord, SourceKernel
from ..message import Direction, Message, Tag
from ..models.inputs import Inputs
from ..numerics import NumericConfig, quantize
from ..placement import Placement, pack_params
from ..runtime import Engine
from ..runtime.trainer import drain_losses
from ..wire import Kind, WireMessage
from .device import Device, DeviceError, DeviceFault, DeviceTimeout


class HostEngine(Engine):
    """The engine of a placed graph's host nodes. A forward leaving for a device Linear that skips
    its dx (``design.skips_dx``: fed by a host source, or by host nodes that only sources feed)
    gets its backward here, as it leaves: a zero gradient, as a loss answers its target. What it
    passes back through reaches only sources, which need the message completed, so every edge
    still sees one backward per forward, and the device sends no dx."""

    def __init__(self, placement: Placement, numerics: NumericConfig, seed: int = 0):
        super().__init__(placement.graph, numerics, seed=seed, members=placement.host_nodes)
        self.skip_dx = dx_skipped(placement)

    def take_outbox(self) -> list[tuple[Edge, Message]]:
        out = super().take_outbox()
        for edge, msg in out:
            if msg.direction is Direction.FWD and edge.dst.node in self.skip_dx:
                self.receive(edge, Message(msg.tag, Direction.BWD, np.zeros_like(msg.payload)))
        return out


class HostRunner:
    def __init__(
        self,
        placement: Placement,
        device: Device,
        numerics: NumericConfig,
        seed: int = 0,
        timeout: float = 30.0,
        on_grads: Callable[[WireMessage], None] | None = None,
        check_status: bool = False,
    ):
        self.placement = placement
        self.device = device
        self.numerics = numerics
        self.timeout = timeout
        self.seed = seed
        self.host = HostEngine(placement, numerics, seed=seed)
        self.received: list[WireMessage] = []  # every message the device sent, in order
        self.on_grads = on_grads if on_grads is not None else (lambda m: None)
        self.next_key = 0
        self.check_status = check_status and device.supports_control
        self.dropped = 0  # instances abandoned after a device fault
        self.pending: deque[Inputs] = deque()  # instances not admitted yet
        self.last_status = None  # the device's last status answer (amp_hls.control.DeviceStatus)
        self.device_losses: list[LossRecord] = []  # device Loss nodes' reports not drained yet
        self.loss_reports: dict[str, int] = {c.loss_of: 0 for c in placement.channels if c.loss_of}
        self.reach = device_reach(placement)

    def _reach_of(self, edge: Edge, msg: Message) -> int:
        """``device_reach`` of where ``msg`` enters the device: a forward's consumer, a backward's producer."""
        node = edge.dst.node if msg.direction is Direction.FWD else edge.src.node
        return self.reach.get((node, msg.direction), 0)

    def active_keys(self) -> set[int]:
        keys: set[int] = set()
        for kernel in self.host.kernels.values():
            if isinstance(kernel, SourceKernel):
                keys.update(tag.key for tag in kernel.in_flight.entries)
        return keys

    def drain_losses(self) -> list[LossRecord]:
        """Take the loss records gathered so far: the host Loss kernels' and the device's reports."""
        records = drain_losses(self.host) + self.device_losses
        self.device_losses = []
        return records

    def send_weights(self, params: dict[str, dict[str, np.ndarray]], version: int) -> None:
        """Quantise float parameters and load them into the device's parameter nodes."""
        msgs = []
        for name, tensors in params.items():
            node = self.placement.graph.nodes[name]
            q = {k: quantize(v, self.numerics.weights) for k, v in tensors.items()}
            ch = self.placement.params_channel(name)
            msgs.append(WireMessage(ch.channel, Kind.WEIGHTS, Direction.FWD, Tag(version, ()), pack_params(node, q)))
        self.device.send(msgs)

    def run(self, instances: Sequence[Inputs], mak: int = 1) -> None:
        """Push every instance through forward and backward (training) with ``mak`` in flight.
        Instances not yet admitted when an error is raised stay queued (``pending``): after
        ``abandon``, ``run([])`` goes on with them."""
        pending = self.pending
        pending.extend(instances)
        while True:
            while pending and len(self.active_keys()) < mak:
                self.host.inject(self.next_key, pending.popleft())
                self.next_key += 1
            self.host.run()
            # the messages that can set the most of the device to work go first: a turn's
            # critical path does not wait behind messages that end a few kernels in
            # (tree-rnn's backward: its padding leaves' gradients before the losses')
            taken = sorted(self.host.take_outbox(), key=lambda em: -self._reach_of(*em))
            outgoing = [self._to_wire(edge, msg) for edge, msg in taken]
            if outgoing:
                self.device.send(outgoing)
            try:
                incoming = self.device.poll(self.timeout, expect=bool(self.active_keys()))
            except DeviceTimeout as exc:
                self._explain(exc)
                raise
            for m in incoming:
                self._route(m)
            if not outgoing and not incoming and self.host.idle:
                if self.active_keys():
                    lost = DeviceError(
                        f"no progress with instances {sorted(self.active_keys())[:5]} in flight: "
                        "a message was lost on the device"
                    )
                    self._explain(lost)
                    raise lost
                if not pending:
                    if self.check_status:
                        self.check()
                    return

    def check(self, timeout: float | None = None) -> None:
        """Ask the device for its status; DeviceError if it reports an error."""
        status, others = self.device.status(self.timeout if timeout is None else timeout)
        self.last_status = status
        for m in others:
            self._route(m)
        if status.faulty:
            raise self.device.fault(status)

    def _explain(self, exc: DeviceError) -> None:
        """A device that stopped answering: its status says why, if it has one to give."""
        if not self.device.supports_control:
            return
        try:
            self.check(min(self.timeout, 5.0))
        except DeviceFault as fault:
            raise fault from exc
        except DeviceError:
            pass  # no answer either: the original error stands

    def abandon(self) -> int:
        """Drop every instance in flight on the host (after the device dropped their messages in
        a soft reset): a fresh host engine, the losses of finished instances kept. Returns how
        many were dropped."""
        lost = len(self.active_keys())
        results = {n: list(k.results) for n, k in self.host.kernels.items() if isinstance(k, LossKernel)}
        self.host = HostEngine(self.placement, self.numerics, seed=self.seed)
        for name, records in results.items():
            kernel = self.host.kernels[name]
            assert isinstance(kernel, LossKernel)
            kernel.results.extend(records)
        self.dropped += lost
        return lost

    def _to_wire(self, edge, msg: Message) -> WireMessage:  # type: ignore[no-untyped-def]
        ch = self.placement.edge_channel(edge)
        return WireMessage(ch.channel, Kind.DATA, msg.direction, msg.tag, np.asarray(msg.payload, dtype=np.int64))

    def _route(self, m: WireMessage) -> None:
        if is_stats(m):  # an answer nobody waits for any more (a probe's): only an error matters
            status = parse_stats(m)
            if status.faulty:
                raise self.device.fault(status)
            return
        self.received.append(m)
        ch = self.placement.channel(m.channel)
        if m.kind is Kind.GRADS:
            self.on_grads(m)
        elif m.kind is Kind.DATA and ch.edge is not None:
            self.host.receive(ch.edge, Message(m.tag, m.direction, m.payload))
        elif m.kind is Kind.LOSS and ch.loss_of is not None and m.direction is Direction.FWD:
            node = self.placement.graph.nodes[ch.loss_of]
            assert isinstance(node, Loss)
            width = self.placement.graph.input_spec(node.name, 0).width
            self.device_losses.append(LossRecord.from_report(m.tag, node.fn, width, self.numerics, m.payload))
            self.loss_reports[node.name] += 1
        else:
            raise DeviceError(f"{ch.spec}: unexpected {m.kind.name} message from the device")


def device_reach(placement: Placement) -> dict[tuple[str, Direction], int]:
    """Per device node and direction, how many device nodes a message entering there can reach
    (forward along the edges, backward against them): a measure of the work it starts."""
    graph = placement.graph
    device = set(placement.device_nodes)
    succ: dict[Direction, dict[str, set[str]]] = {d: {x: set() for x in device} for d in Direction}
    for e in graph.edges:
        if e.src.node in device and e.dst.node in device:
            succ[Direction.FWD][e.src.node].add(e.dst.node)
            succ[Direction.BWD][e.dst.node].add(e.src.node)
    reach = {}
    for d in Direction:
        for start in device:
            seen, todo = {start}, [start]
            while todo:
                for y in succ[d][todo.pop()] - seen:
                    seen.add(y)
                    todo.append(y)
            reach[(start, d)] = len(seen)
    return reach


def by_channel(msgs: Sequence[WireMessage]) -> dict[tuple[int, Kind], list[WireMessage]]:
    """Messages in order within each (channel, kind). Devices may interleave channels as their
    schedules like; within a channel, at mak=1, the order is the protocol's and must match."""
    out: dict[tuple[int, Kind], list[WireMessage]] = {}
    for m in msgs:
        out.setdefault((m.channel, m.kind), []).append(m)
    return out
