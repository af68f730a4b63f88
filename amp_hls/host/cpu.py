"""The numpy device model: the device-placed nodes on numpy fixed-point kernels, behind the wire.

This is the golden reference of the hardware protocol: parameter nodes hold quantised weights,
load WEIGHTS messages whenever they arrive, accumulate gradients in 48-bit integers and dump them
as GRADS every ``muf`` backward messages, then start again from zero. It answers the control
channel (``amp_hls.control``) as the hardware does: STATUS with the sticky error flags and the
saturation count, RESET with a soft reset (caches, accumulators, dump numbers, errors and counts
cleared; weights and their version kept).

A kernel error raises ``DeviceError`` at once (``sticky=False``, the default, with the kernel's
own message) or, like the hardware (``sticky=True``), only sets the kernel's error flag: the
message is dropped and the rest of the device goes on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np

from ..control import SATURATION_BITS, Boundary, DeviceStatus, Op, ctrl_op, is_ctrl, stats_message
from ..design import dx_skipped
from ..errors import KernelError
from ..kernels import Kernel, LinearKernel, LossKernel, ParamKernel
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig
from ..placement import Placement, pack_params, unpack_params
from ..runtime import Engine
from ..wire import GRADS_STATE, Kind, WireMessage
from .device import Device, DeviceError, DeviceTimeout
from .settings import DeviceSettings


class CpuDevice(Device):
    name = "cpu"

    def __init__(self, placement: Placement, numerics: NumericConfig, muf: int = 1, seed: int = 0,
                 sticky: bool = False):
        if not numerics.fixed:
            raise DeviceError("a device computes in fixed point: use NumericConfig('fixed')")
        super().__init__(placement)
        self.numerics = numerics
        self.muf = muf
        self.seed = seed
        self.sticky = sticky
        self._build()

    def _build(self) -> None:
        self.engine = Engine(self.placement.graph, self.numerics, seed=self.seed,
                             members=self.placement.device_nodes, max_batch=1)
        self.engine.on_backward = self._maybe_dump
        self._skip_dx = dx_skipped(self.placement)
        for name in self._skip_dx:  # no dx loop, no in0_grad message (design.skips_dx)
            kernel = self.engine.kernels[name]
            assert isinstance(kernel, (LinearKernel, LossKernel))
            if isinstance(kernel, LinearKernel):
                kernel.skip_dx = True  # a Loss only leaves out its target's zero gradient, below
        self._out: list[WireMessage] = []
        self._dumps: dict[str, int] = {}
        self._errors = 0  # kernel error flags, bit i = device node i
        self._boundary = 0  # Boundary bits

    def _maybe_dump(self, kernel: Kernel) -> None:
        if isinstance(kernel, ParamKernel) and kernel.n_grads >= self.muf:
            ch = self.placement.params_channel(kernel.name)
            rows = pack_params(kernel.node, kernel.grads)
            seq = self._dumps.get(kernel.name, 0)
            self._dumps[kernel.name] = seq + 1
            state = {"version": kernel.version & 0xFFFF, "count": kernel.n_grads}  # wire.GRADS_STATE
            tag = Tag(seq, tuple(state[w] for w in GRADS_STATE))  # dump number
            self._out.append(WireMessage(ch.channel, Kind.GRADS, Direction.BWD, tag, rows))
            kernel.zero_grads()
            self.counters.grads_dumps += 1

    def send(self, msgs: Sequence[WireMessage]) -> None:
        for m in msgs:
            self.counters.sent += 1
            if is_ctrl(m):
                self._control(ctrl_op(m), m.tag.key)
                continue
            ch = next((c for c in self.placement.channels if c.channel == m.channel), None)
            if ch is not None and m.kind is Kind.DATA and ch.edge is not None \
                    and m.direction is (Direction.FWD if self.placement.enters_device(ch.edge) else Direction.BWD):
                self.engine.receive(ch.edge, Message(m.tag, m.direction, m.payload.astype(np.int64)))
            elif ch is not None and m.kind is Kind.WEIGHTS and ch.node is not None and m.direction is Direction.FWD:
                kernel = self.engine.kernels[ch.node]
                assert isinstance(kernel, ParamKernel)
                kernel.load_quantized(unpack_params(kernel.node, m.payload), version=m.tag.key)
                self.counters.weights_loads += 1
            else:  # what the boundary's demux cannot route
                self._boundary |= Boundary.ROUTE
                if not self.sticky:
                    where = ch.spec if ch is not None else f"channel {m.channel}"
                    raise DeviceError(f"{where}: a device does not accept {m.kind.name} {m.direction.name} messages")

    def _control(self, op: int, key: int) -> None:
        """Answer a CTRL request (amp_hls.control): the device settles (the messages sent before
        the request are served), a snapshot is taken, then the reset it asks for."""
        self._settle(time.monotonic() + 60.0, raise_errors=False)
        status = DeviceStatus(op, key, self._boundary, self.saturations, self._errors)
        if op == Op.RESET:
            out = self._out  # sent before the answer: the host drops it
            self.reset()
            self._out = out
        self._out.append(stats_message(status))

    @property
    def settings(self) -> DeviceSettings:
        return DeviceSettings(self.numerics, self.muf, source="the numpy device model")

    @property
    def saturations(self) -> int:
        """Values saturated since the last reset, modulo 2**SATURATION_BITS (as STATS reports them)."""
        return self.engine.counter.total % (1 << SATURATION_BITS)

    def _kernel_failed(self, exc: KernelError, raise_errors: bool = True) -> None:
        found = re.match(r"node '(\w+)'", str(exc))
        nodes = self.placement.device_nodes
        if found and found.group(1) in nodes:
            self._errors |= 1 << nodes.index(found.group(1))
        else:
            self._boundary |= Boundary.ROUTE
        if raise_errors and not self.sticky:  # the same error type every device backend raises
            raise DeviceError(f"numpy device kernel error: {exc}") from exc

    def _settle(self, deadline: float, raise_errors: bool = True) -> None:
        """Run the engine until idle, its output moved to the outgoing queue."""
        while not self.engine.idle:
            try:
                self.engine.step()
            except KernelError as exc:  # sticky: the message is dropped, the device goes on
                self._kernel_failed(exc, raise_errors)
            if time.monotonic() > deadline:
                raise DeviceTimeout("cpu device still busy past its deadline")
        for edge, msg in self.engine.take_outbox():
            if msg.direction is Direction.BWD and edge.dst.node in self._skip_dx:
                continue  # the placeholder gradient of a Linear that skips dx: never sent
            ch = self.placement.edge_channel(edge)
            self._out.append(WireMessage(ch.channel, Kind.DATA, msg.direction, msg.tag, msg.payload))
        for kernel in self.engine.kernels.values():  # a device loss reports each judged message
            if isinstance(kernel, LossKernel):
                ch = self.placement.loss_channel(kernel.name)
                self._out.extend(WireMessage(ch.channel, Kind.LOSS, Direction.FWD, r.tag, r.report)
                                 for r in kernel.results)
                kernel.results.clear()

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        start = time.monotonic()
        try:
            self._settle(start + timeout)
        except DeviceTimeout:
            raise DeviceTimeout(f"cpu device still busy after {timeout} s") from None
        out, self._out = self._out, []
        self.counters.received += len(out)
        return out

    def reset(self) -> None:
        # the weights survive a reset, and with them the version they were loaded as (as in
        # the C++ and RTL kernels, whose reset clears caches and accumulators only)
        weights = {n: (dict(k.qparams), k.version) for n, k in self.engine.kernels.items() if isinstance(k, ParamKernel)}
        self._build()
        for name, (q, version) in weights.items():
            self.engine.kernels[name].load_quantized(q, version=version)  # type: ignore[attr-defined]
