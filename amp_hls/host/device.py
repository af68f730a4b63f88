"""The one interface the host talks to a device through (docs/glossary.md, backend).

Everything crosses as wire-format messages (``amp_hls.wire.WireMessage``): the numpy device
model, the C simulation, the RTL simulation and the board all take the same traffic, so the host
cannot tell them apart except by speed.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import AmpHlsError
from ..placement import Placement
from ..wire import WireMessage


class DeviceError(AmpHlsError):
    """The device failed, stopped answering, or broke the protocol."""


class DeviceTimeout(DeviceError):
    """A wait on the device ran past its timeout."""


@dataclass
class DeviceCounters:
    sent: int = 0
    received: int = 0
    grads_dumps: int = 0
    weights_loads: int = 0


class Device(abc.ABC):
    """A device running the device-placed part of a graph."""

    name = "device"

    def __init__(self, placement: Placement):
        self.placement = placement
        self.channels = placement.channel_map
        self.counters = DeviceCounters()

    @abc.abstractmethod
    def send(self, msgs: Sequence[WireMessage]) -> None:
        """Hand messages to the device (DATA forward/backward, WEIGHTS)."""

    @abc.abstractmethod
    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        """Everything the device has produced once it settles (or within ``timeout`` seconds).

        Returns an empty list when the device is idle with nothing to say; raises
        ``DeviceTimeout`` when it is still busy after ``timeout``.
        """

    @abc.abstractmethod
    def reset(self) -> None:
        """Back to power-on state: empty FIFOs and caches, zero accumulators, weights kept."""

    def close(self) -> None:  # noqa: B027 - optional hook: most devices hold nothing to release
        """Release the device (default: nothing to release)."""

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
