"""The one interface the host talks to a device through (docs/glossary.md, backend).

Everything crosses as wire-format messages (``amp_hls.wire.WireMessage``): the numpy device
model, the C simulation, the RTL simulation and the board all take the same traffic, so the host
cannot tell them apart except by speed.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..control import DeviceStatus, Op, ctrl_message, is_stats, parse_stats, with_control
from ..errors import AmpHlsError
from ..placement import Placement
from ..wire import MAX_KEY, WireMessage

if TYPE_CHECKING:
    from .settings import DeviceSettings


class DeviceError(AmpHlsError):
    """The device failed, stopped answering, or broke the protocol."""


class DeviceTimeout(DeviceError):
    """A wait on the device ran past its timeout."""


class DeviceFault(DeviceError):
    """The device reports an error on its control channel (kernel error flags, boundary errors)."""

    def __init__(self, message: str, status: DeviceStatus):
        super().__init__(message)
        self.status = status


@dataclass
class DeviceCounters:
    sent: int = 0
    received: int = 0
    grads_dumps: int = 0
    weights_loads: int = 0
    status_requests: int = 0  # CTRL STATUS answered
    soft_resets: int = 0  # CTRL RESET answered


class Device(abc.ABC):
    """A device running the device-placed part of a graph."""

    name = "device"
    supports_control = True  # answers CTRL on the control channel (amp_hls.control)

    def __init__(self, placement: Placement):
        self.placement = placement
        self.channels = with_control(placement.channel_map)  # the graph's channels and the control channel
        self.counters = DeviceCounters()
        self._ctrl_key = 0

    @abc.abstractmethod
    def send(self, msgs: Sequence[WireMessage]) -> None:
        """Hand messages to the device (DATA forward/backward, WEIGHTS)."""

    @abc.abstractmethod
    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        """Everything the device has produced once it settles (or within ``timeout`` seconds).

        Returns an empty list when the device is idle with nothing to say; raises
        ``DeviceTimeout`` when it is still busy after ``timeout``.
        """

    @property
    def settings(self) -> DeviceSettings | None:
        """What the device was generated for (host.settings); None: nothing to check."""
        return None

    def poll(self, timeout: float, expect: bool) -> list[WireMessage]:
        """What the device has produced so far. A device that can be run to idle (the models and
        simulators) is, as ``recv`` does; an asynchronous one (the board) returns what has
        arrived, waiting up to ``timeout`` for a first message only when ``expect`` (instances
        are in flight)."""
        return self.recv(timeout)

    @abc.abstractmethod
    def reset(self) -> None:
        """Back to power-on state: empty FIFOs and caches, zero accumulators, weights kept."""

    # the control channel (amp_hls.control) -------------------------------------------------
    def control(self, op: Op, timeout: float = 5.0) -> tuple[DeviceStatus, list[WireMessage], list[WireMessage]]:
        """Send a CTRL request and wait for its STATS answer: (the answer, the messages that came
        before it, those that came after it in the same receive)."""
        if not self.supports_control:
            raise DeviceError(f"the {self.name} device has no control channel (status and soft reset)")
        self._ctrl_key = (self._ctrl_key + 1) & MAX_KEY
        key = self._ctrl_key
        self.send([ctrl_message(op, key)])
        deadline = time.monotonic() + timeout
        before: list[WireMessage] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeviceTimeout(f"the {self.name} device sent no STATS answer to CTRL {op.name} within {timeout} s")
            try:
                msgs = self.poll(remaining, expect=True)
            except DeviceTimeout:
                raise
            except DeviceError:  # another kernel error on the way: its flag is in the answer
                continue
            for i, m in enumerate(msgs):
                if is_stats(m) and m.tag.key == key:
                    if op is Op.RESET:
                        self.counters.soft_resets += 1
                    else:
                        self.counters.status_requests += 1
                    return parse_stats(m), before, msgs[i + 1:]
                before.append(m)

    def status(self, timeout: float = 5.0) -> tuple[DeviceStatus, list[WireMessage]]:
        """The device's status, and every other message received while waiting for it (in order)."""
        status, before, after = self.control(Op.STATUS, timeout)
        return status, before + after

    def soft_reset(self, timeout: float = 5.0) -> tuple[DeviceStatus, int, list[WireMessage]]:
        """A CTRL RESET: (the status just before the reset, the messages from before it that were
        dropped, the messages that came after the answer)."""
        status, before, after = self.control(Op.RESET, timeout)
        return status, len(before), after

    def recover(self, timeout: float = 5.0) -> tuple[DeviceStatus | None, int, list[WireMessage]]:
        """After a fault: the soft reset (as ``soft_reset``), or, for a device without a control
        channel, ``reset`` (no status then: None, 0, [])."""
        if self.supports_control:
            return self.soft_reset(timeout)
        self.reset()
        return None, 0, []

    def describe(self, status: DeviceStatus) -> str:
        return status.describe(self.placement.device_nodes)

    def fault(self, status: DeviceStatus) -> DeviceFault:
        return DeviceFault(f"the {self.name} device reports an error: {self.describe(status)}", status)

    def close(self) -> None:  # noqa: B027 - optional hook: most devices hold nothing to release
        """Release the device (default: nothing to release)."""

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
