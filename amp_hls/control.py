"""The device's own channel: CTRL requests in, STATS answers out (docs/contracts.md, Control).

Every device (the numpy device model, the C simulation, the RTL ``amp_top`` and a board built
by the rtl flow) answers the same two requests on channel ``CONTROL_CHANNEL``, the id above every
graph channel (``amp_hls.ir.limits`` keeps graphs below it):

- ``Op.STATUS``: answer with a STATS message;
- ``Op.RESET``: a soft reset -- every kernel's state (tag tables, joins, gradient accumulators,
  dump numbers), every internal FIFO, the sticky error flags and the saturation counters are
  cleared; the loaded weights and their version are kept -- then answer with STATS.

A CTRL message is one row of one 64-bit word, the op; its key is the host's request number. The
STATS answer carries the same key, direction BWD, and one row of ``STATS_WIDTH`` 64-bit words
(``STATS_FIELDS``), a snapshot taken when the device takes the request (for RESET: just before
the reset, so one round trip both reports and clears a fault):

    op            the request answered
    boundary      the boundary's sticky error bits (``Boundary``)
    saturations   values saturated since the last reset, all kernels: the sum of per-kernel
                  32-bit counters, modulo 2**32
    errors0..3    kernel error flags, bit i = the i-th device node (placement order)

A device answers requests in order, after the messages sent before them have been taken in, and
messages sent after a request reach the kernels only after the answer has left. What the device
sent before a RESET's answer belongs to the time before the reset: the host drops it.

Everything here is the one definition: ``control_constants()`` is what the C++ and SystemVerilog
generators emit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag

import numpy as np

from .errors import WireError
from .message import Direction, Tag
from .wire import MAX_CHANNELS, ChannelMap, ChannelSpec, Kind, Shape, WireMessage, message_beats

CONTROL_CHANNEL = MAX_CHANNELS - 1  # above every graph channel
CONTROL_NAME = "amp_control"  # no graph channel can take it: node names never start with amp_
CTRL_WIDTH = 1  # the op
ERROR_WORDS = 4  # kernel error flags: 4 x 64 bits cover the IR's largest graph
MAX_KERNELS = 64 * ERROR_WORDS
STATS_FIELDS = ("op", "boundary", "saturations", *(f"errors{i}" for i in range(ERROR_WORDS)))
STATS_WIDTH = len(STATS_FIELDS)
SATURATION_BITS = 32  # per-kernel counters; the STATS word is their sum modulo 2**32
RESET_CYCLES = 4  # RTL: clock cycles the soft reset holds kernels and FIFOs
WORD_MASK = (1 << 64) - 1


class Op(IntEnum):
    STATUS = 1
    RESET = 2


class Boundary(IntFlag):
    """The boundary's sticky error bits (STATS word ``boundary``)."""

    ROUTE = 1  # a host_in header for no route (channel, kind, direction or rows): the rest of
    #            its DMA transfer (up to host_in's TLAST) was dropped
    KEEP = 2  # a host_in beat with TKEEP other than all ones (RTL only)


BOUNDARY_TEXT = {
    Boundary.ROUTE: "the boundary dropped a host_in message it could not route (and the rest of its transfer)",
    Boundary.KEEP: "host_in carried a partial beat (TKEEP not all ones)",
}


def control_spec() -> ChannelSpec:
    return ChannelSpec(CONTROL_CHANNEL, CONTROL_NAME,
                       {Kind.CTRL: Shape(CTRL_WIDTH, 1), Kind.STATS: Shape(STATS_WIDTH, 1)})


def with_control(channels: ChannelMap) -> ChannelMap:
    """``channels`` and the control channel: the map both ends of a device link decode with."""
    if CONTROL_CHANNEL in channels:
        if channels[CONTROL_CHANNEL] != control_spec():
            raise WireError(f"channel {CONTROL_CHANNEL} is the control channel; a graph cannot use it")
        return channels
    return ChannelMap([*channels.values(), control_spec()])


def _signed(word: int) -> int:
    """A 64-bit word as the int64 the wire's 64-bit elements hold."""
    word &= WORD_MASK
    return word - (1 << 64) if word >> 63 else word


def ctrl_message(op: Op, key: int) -> WireMessage:
    return WireMessage(CONTROL_CHANNEL, Kind.CTRL, Direction.FWD, Tag(key, ()),
                       np.array([[int(op)]], dtype=np.int64))


def is_ctrl(msg: WireMessage) -> bool:
    return msg.channel == CONTROL_CHANNEL and msg.kind is Kind.CTRL


def is_stats(msg: WireMessage) -> bool:
    return msg.channel == CONTROL_CHANNEL and msg.kind is Kind.STATS


def ctrl_op(msg: WireMessage) -> int:
    """The op a CTRL message asks for (any value: an unknown op is answered like STATUS)."""
    return int(msg.payload[0, 0]) & WORD_MASK


@dataclass(frozen=True)
class DeviceStatus:
    """One STATS answer."""

    op: int
    key: int
    boundary: int  # Boundary bits
    saturations: int
    kernel_errors: int  # bit i: the i-th device node's kernel raised its error flag

    @property
    def faulty(self) -> bool:
        return bool(self.boundary or self.kernel_errors)

    def failed_kernels(self, names: Sequence[str]) -> list[str]:
        """The device nodes whose kernel raised its error flag (``names``: placement order)."""
        return [n for i, n in enumerate(names) if self.kernel_errors >> i & 1]

    def describe(self, names: Sequence[str]) -> str:
        parts = [f"kernel k_{n} raised its error flag (a message it could not take)"
                 for n in self.failed_kernels(names)]
        extra = self.kernel_errors >> len(names)
        if extra:
            parts.append(f"error flags beyond the {len(names)} kernels: {extra << len(names):#x}")
        parts += [text for bit, text in BOUNDARY_TEXT.items() if self.boundary & bit]
        if self.boundary & ~sum(BOUNDARY_TEXT):
            parts.append(f"unknown boundary error bits {self.boundary:#x}")
        return "; ".join(parts) or "no error"

    def words(self) -> list[int]:
        """The STATS payload, unsigned 64-bit words in ``STATS_FIELDS`` order."""
        errors = [(self.kernel_errors >> (64 * i)) & WORD_MASK for i in range(ERROR_WORDS)]
        return [self.op & WORD_MASK, self.boundary & WORD_MASK, self.saturations % (1 << SATURATION_BITS), *errors]


def stats_message(status: DeviceStatus) -> WireMessage:
    payload = np.array([[_signed(w) for w in status.words()]], dtype=np.int64)
    return WireMessage(CONTROL_CHANNEL, Kind.STATS, Direction.BWD, Tag(status.key, ()), payload)


def parse_stats(msg: WireMessage) -> DeviceStatus:
    if not is_stats(msg):
        raise WireError(f"not a STATS message: channel {msg.channel}, kind {msg.kind.name}")
    words = [int(w) & WORD_MASK for w in msg.payload[0]]
    errors = sum(w << (64 * i) for i, w in enumerate(words[3:3 + ERROR_WORDS]))
    return DeviceStatus(words[0], msg.tag.key, words[1], words[2], errors)


def control_constants() -> dict[str, int]:
    """Every number of the control protocol, named as C identifiers, for the C++ and SV generators."""
    c = {
        "CONTROL_CHANNEL": CONTROL_CHANNEL,
        "CTRL_WIDTH": CTRL_WIDTH,
        "CTRL_BEATS": message_beats(Kind.CTRL, 1, CTRL_WIDTH),
        "STATS_WIDTH": STATS_WIDTH,
        "STATS_BEATS": message_beats(Kind.STATS, 1, STATS_WIDTH),
        "ERROR_WORDS": ERROR_WORDS,
        "MAX_KERNELS": MAX_KERNELS,
        "SATURATION_BITS": SATURATION_BITS,
        "RESET_CYCLES": RESET_CYCLES,
    }
    for op in Op:
        c[f"OP_{op.name}"] = int(op)
    for i, name in enumerate(STATS_FIELDS):
        c[f"STATS_{name.upper()}"] = i
    for bit in Boundary:
        c[f"BOUNDARY_{bit.name}"] = int(bit)
    return c
