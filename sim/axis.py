"""Message-level AXI-stream drivers on cocotbext-axi: wire messages in, wire messages out.

A message goes out as one AXI-stream frame (TLAST on its last beat, as ``wire.encode_beats``
lays it out); a received frame is decoded with ``wire.decode_beats``, which checks the header,
the beat count and TLAST. Both ends can stall at random (TVALID gaps on the source, TREADY gaps
on the sink), so kernels are exercised under back-pressure.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import numpy as np
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from amp_hls.wire import ChannelMap, WireMessage, decode_beats, encode_beats


def _stalls(rng: random.Random, p: float) -> Iterator[bool]:
    """A pause generator: True (stall this cycle) with probability ``p``."""
    return (rng.random() < p for _ in itertools.count())


class MessageSource:
    """Drives wire messages into the stream ``<prefix>_TDATA/TVALID/TREADY/TLAST``."""

    def __init__(self, dut, prefix: str, channels: ChannelMap, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        # byte_lanes=1: without TKEEP the library would treat TDATA as bytes and truncate beats
        self._axis = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, prefix), dut.ap_clk, dut.ap_rst_n,
            reset_active_level=False, byte_lanes=1,
        )
        self._axis.log.setLevel("WARNING")
        self._axis.set_pause_generator(_stalls(rng, stall))
        self._channels = channels

    async def send(self, msg: WireMessage) -> None:
        data, _ = encode_beats(msg, self._channels)
        await self._axis.send(AxiStreamFrame([int(b) for b in data]))

    async def send_batch(self, msgs: list[WireMessage]) -> None:
        """Several messages as one frame, TLAST on the last beat only, as an AXI DMA sends a
        buffer: the receiver must find the boundaries from the headers."""
        beats = [int(b) for m in msgs for b in encode_beats(m, self._channels)[0]]
        await self._axis.send(AxiStreamFrame(beats))

    async def send_beats(self, beats: list[int]) -> None:
        """One frame of raw beats (e.g. a message whose header a test has edited)."""
        await self._axis.send(AxiStreamFrame(beats))

    async def idle(self) -> None:
        await self._axis.wait()


class MessageSink:
    """Receives beats from ``<prefix>_...`` and decodes each TLAST-delimited frame."""

    def __init__(self, dut, prefix: str, channels: ChannelMap, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        self._axis = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, prefix), dut.ap_clk, dut.ap_rst_n,
            reset_active_level=False, byte_lanes=1,
        )
        self._axis.log.setLevel("WARNING")
        self._axis.set_pause_generator(_stalls(rng, stall))
        self._channels = channels

    async def recv(self) -> WireMessage:
        frame = await self._axis.recv()
        beats = np.array([int(b) for b in frame.tdata], dtype=np.uint64)  # beats >= 2**63 too
        last = np.arange(len(beats)) == len(beats) - 1
        (msg,) = decode_beats(beats, last, self._channels)  # one frame holds exactly one message
        return msg

    def empty(self) -> bool:
        return self._axis.empty()
