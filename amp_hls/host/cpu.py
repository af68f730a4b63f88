"""The numpy device model: the device-placed nodes on numpy fixed-point kernels, behind the wire.

This is the golden reference of the hardware protocol: parameter nodes hold quantised weights,
load WEIGHTS messages whenever they arrive, accumulate gradients in 48-bit integers and dump them
as GRADS every ``muf`` backward messages, then start again from zero.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..errors import KernelError
from ..kernels import Kernel, ParamKernel
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig
from ..placement import Placement, pack_params, unpack_params
from ..runtime import Engine
from ..wire import Kind, WireMessage
from .device import Device, DeviceError, DeviceTimeout


class CpuDevice(Device):
    name = "cpu"

    def __init__(self, placement: Placement, numerics: NumericConfig, muf: int = 1, seed: int = 0):
        if not numerics.fixed:
            raise DeviceError("a device computes in fixed point: use NumericConfig('fixed')")
        super().__init__(placement)
        self.numerics = numerics
        self.muf = muf
        self.seed = seed
        self._build()

    def _build(self) -> None:
        self.engine = Engine(self.placement.graph, self.numerics, seed=self.seed,
                             members=self.placement.device_nodes, max_batch=1)
        self.engine.on_backward = self._maybe_dump
        self._out: list[WireMessage] = []
        self._dumps: dict[str, int] = {}

    def _maybe_dump(self, kernel: Kernel) -> None:
        if isinstance(kernel, ParamKernel) and kernel.n_grads >= self.muf:
            ch = self.placement.params_channel(kernel.name)
            rows = pack_params(kernel.node, kernel.grads)
            seq = self._dumps.get(kernel.name, 0)
            self._dumps[kernel.name] = seq + 1
            tag = Tag(seq, (kernel.version & 0xFFFF,))  # dump number; weights version it saw
            self._out.append(WireMessage(ch.channel, Kind.GRADS, Direction.BWD, tag, rows))
            kernel.zero_grads()
            self.counters.grads_dumps += 1

    def send(self, msgs: Sequence[WireMessage]) -> None:
        for m in msgs:
            ch = self.placement.channel(m.channel)
            if m.kind is Kind.DATA and ch.edge is not None:
                self.engine.receive(ch.edge, Message(m.tag, m.direction, m.payload.astype(np.int64)))
            elif m.kind is Kind.WEIGHTS and ch.node is not None:
                kernel = self.engine.kernels[ch.node]
                assert isinstance(kernel, ParamKernel)
                kernel.load_quantized(unpack_params(kernel.node, m.payload), version=m.tag.key)
                self.counters.weights_loads += 1
            else:
                raise DeviceError(f"{ch.spec}: a device does not accept {m.kind.name} messages")
            self.counters.sent += 1

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        deadline = time.monotonic() + timeout
        while not self.engine.idle:
            try:
                self.engine.step()
            except KernelError as exc:  # the same error type every device backend raises
                raise DeviceError(f"numpy device kernel error: {exc}") from exc
            if time.monotonic() > deadline:
                raise DeviceTimeout(f"cpu device still busy after {timeout} s")
        out = self._out
        for edge, msg in self.engine.take_outbox():
            ch = self.placement.edge_channel(edge)
            out.append(WireMessage(ch.channel, Kind.DATA, msg.direction, msg.tag, msg.payload))
        self._out = []
        self.counters.received += len(out)
        return out

    def reset(self) -> None:
        # the weights survive a reset, and with them the version they were loaded as (as in
        # the C++ and RTL kernels, whose reset clears caches and accumulators only)
        weights = {n: (dict(k.qparams), k.version) for n, k in self.engine.kernels.items() if isinstance(k, ParamKernel)}
        self._build()
        for name, (q, version) in weights.items():
            self.engine.kernels[name].load_quantized(q, version=version)  # type: ignore[attr-defined]
