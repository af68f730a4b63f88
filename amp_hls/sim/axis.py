"""Message-level AXI-stream drivers on cocotbext-axi: wire messages in, wire messages out.

A message goes out as one AXI-stream frame (TLAST on its last beat, as ``wire.encode_beats``
lays it out); a received frame is decoded with ``wire.decode_beats``, which checks the header,
the beat count and TLAST. Both ends can stall at random (TVALID gaps on the source, TREADY gaps
on the sink), so kernels are exercised under back-pressure. A stream with TKEEP (``amp_top``'s
host ports, as a DMA drives them) carries each beat as its eight bytes, and a received frame
must still be whole beats: a byte TKEEP drops breaks the decoding.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

import numpy as np
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from amp_hls.wire import ChannelMap, WireMessage, decode_beats, decode_bytes, encode_beats


def _stalls(rng: random.Random, p: float) -> Iterator[bool]:
    """A pause generator: True (stall this cycle) with probability ``p``."""
    return (rng.random() < p for _ in itertools.count())


class _Stream:
    """One end of the stream ``<prefix>_TDATA/TVALID/TREADY/TLAST[/TKEEP]``, clocked by
    ``ap_clk`` and reset by ``ap_rst_n``, stalling with probability ``stall``."""

    def __init__(self, kind: type[AxiStreamSource] | type[AxiStreamSink], dut, prefix: str,  # type: ignore[no-untyped-def]
                 channels: ChannelMap, rng: random.Random, stall: float):
        bus = AxiStreamBus.from_prefix(dut, prefix)
        self._bytes = hasattr(bus, "tkeep")  # the library then takes one lane per TKEEP bit
        # byte_lanes=1: without TKEEP the library would treat TDATA as bytes and truncate beats
        lanes = {} if self._bytes else {"byte_lanes": 1}
        self._axis = kind(bus, dut.ap_clk, dut.ap_rst_n, reset_active_level=False, **lanes)
        self._axis.log.setLevel("WARNING")
        self._axis.set_pause_generator(_stalls(rng, stall))
        self._channels = channels


class MessageSource(_Stream):
    """Drives wire messages into the stream ``<prefix>_...``."""

    def __init__(self, dut, prefix: str, channels: ChannelMap, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        super().__init__(AxiStreamSource, dut, prefix, channels, rng, stall)

    async def send(self, msg: WireMessage) -> None:
        await self.send_beats(encode_beats(msg, self._channels)[0])

    async def send_batch(self, msgs: Sequence[WireMessage]) -> None:
        """Several messages as one frame, TLAST on the last beat only, as an AXI DMA sends a
        buffer: the receiver must find the boundaries from the headers."""
        await self.send_beats([b for m in msgs for b in encode_beats(m, self._channels)[0]])

    async def send_beats(self, beats: Sequence[int], tkeep: Sequence[int] | None = None) -> None:
        """One frame of raw beats (e.g. a message whose header a test has edited); ``tkeep``, one
        bit per byte, marks bytes as absent on a stream with TKEEP."""
        words = [int(b) for b in beats]
        data = b"".join(w.to_bytes(8, "little") for w in words) if self._bytes else words
        await self._axis.send(AxiStreamFrame(data, tkeep=None if tkeep is None else list(tkeep)))

    async def idle(self) -> None:
        await self._axis.wait()


class MessageSink(_Stream):
    """Receives beats from ``<prefix>_...`` and decodes each TLAST-delimited frame."""

    def __init__(self, dut, prefix: str, channels: ChannelMap, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        super().__init__(AxiStreamSink, dut, prefix, channels, rng, stall)

    async def recv(self) -> WireMessage:
        frame = await self._axis.recv()
        if self._bytes:
            msgs = decode_bytes(bytes(frame.tdata), self._channels)
        else:
            beats = np.array([int(b) for b in frame.tdata], dtype=np.uint64)  # beats >= 2**63 too
            msgs = decode_beats(beats, np.arange(len(beats)) == len(beats) - 1, self._channels)
        (msg,) = msgs  # one frame holds exactly one message
        return msg

    def empty(self) -> bool:
        return self._axis.empty()
