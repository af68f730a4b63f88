"""Drives a placed graph: host nodes on the numpy engine, device nodes behind a ``Device``.

The loop admits instances while fewer than ``mak`` are in flight, runs the host part until it
settles, ships what crosses the boundary to the device as wire messages, and routes what comes
back: DATA to the host nodes, GRADS to ``on_grads`` (the parameter server, or a test).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from ..kernels.host import SourceKernel
from ..message import Direction, Message, Tag
from ..models.inputs import Inputs
from ..numerics import NumericConfig, quantize
from ..placement import Placement, pack_params
from ..runtime import Engine
from ..wire import Kind, WireMessage
from .device import Device, DeviceError


class HostRunner:
    def __init__(
        self,
        placement: Placement,
        device: Device,
        numerics: NumericConfig,
        seed: int = 0,
        timeout: float = 30.0,
        on_grads: Callable[[WireMessage], None] | None = None,
    ):
        self.placement = placement
        self.device = device
        self.numerics = numerics
        self.timeout = timeout
        self.host = Engine(placement.graph, numerics, seed=seed, members=placement.host_nodes)
        self.received: list[WireMessage] = []  # every message the device sent, in order
        self.on_grads = on_grads if on_grads is not None else (lambda m: None)
        self.next_key = 0

    def active_keys(self) -> set[int]:
        keys: set[int] = set()
        for kernel in self.host.kernels.values():
            if isinstance(kernel, SourceKernel):
                keys.update(tag.key for tag in kernel.in_flight.entries)
        return keys

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
        """Push every instance through forward and backward (training) with ``mak`` in flight."""
        pending = deque(instances)
        while True:
            while pending and len(self.active_keys()) < mak:
                self.host.inject(self.next_key, pending.popleft())
                self.next_key += 1
            self.host.run()
            outgoing = [self._to_wire(edge, msg) for edge, msg in self.host.take_outbox()]
            if outgoing:
                self.device.send(outgoing)
            incoming = self.device.recv(self.timeout)
            for m in incoming:
                self._route(m)
            if not outgoing and not incoming and self.host.idle:
                if self.active_keys():
                    raise DeviceError(
                        f"no progress with instances {sorted(self.active_keys())[:5]} in flight: "
                        "a message was lost on the device"
                    )
                if not pending:
                    return

    def _to_wire(self, edge, msg: Message) -> WireMessage:  # type: ignore[no-untyped-def]
        ch = self.placement.edge_channel(edge)
        return WireMessage(ch.channel, Kind.DATA, msg.direction, msg.tag, np.asarray(msg.payload, dtype=np.int64))

    def _route(self, m: WireMessage) -> None:
        self.received.append(m)
        ch = self.placement.channel(m.channel)
        if m.kind is Kind.GRADS:
            self.on_grads(m)
        elif m.kind is Kind.DATA and ch.edge is not None:
            self.host.receive(ch.edge, Message(m.tag, m.direction, m.payload))
        else:
            raise DeviceError(f"{ch.spec}: unexpected {m.kind.name} message from the device")


def by_channel(msgs: Sequence[WireMessage]) -> dict[tuple[int, Kind], list[WireMessage]]:
    """Messages in order within each (channel, kind). Devices may interleave channels as their
    schedules like; within a channel, at mak=1, the order is the protocol's and must match."""
    out: dict[tuple[int, Kind], list[WireMessage]] = {}
    for m in msgs:
        out.setdefault((m.channel, m.kind), []).append(m)
    return out
