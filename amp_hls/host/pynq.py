"""The PYNQ board backend: the generated design's bitstream driven over AXI DMA.

``pynq`` is imported only when a board is used (the ``pynq`` extra); without it, or without a
board, the error says so and suggests ``--backend cpu``. Every wait is bounded: pynq's own
``DMA.wait()`` spins forever when a transfer never completes, so this driver polls ``idle``
against a deadline instead.

Transfers: messages are packed back to back into MM2S transfers of at most the DMA's maximum
length (the board's buffer-length register width); message boundaries on ``host_in`` come from
the headers, so a transfer's TLAST needs no alignment with them. On S2MM every message ends with
TLAST, so each completed receive is one message, of the length the DMA reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..ir import load
from ..placement import place
from ..wire import BEAT_BYTES, StreamDecoder, WireMessage, encode_bytes, message_beats
from .device import Device, DeviceError, DeviceTimeout

S2MM_LENGTH = 0x58  # AXI DMA register: bytes written by the last S2MM transfer (PG021)
DEFAULT_LENGTH_BITS = 26
POLL_S = 50e-6


def import_pynq() -> ModuleType:
    try:
        import pynq
    except ImportError:
        raise DeviceError(
            "the pynq backend needs the pynq package (pip install 'amp-hls[pynq]') and a board; "
            "without one, train with --backend cpu (or numpy-device / csim)"
        ) from None
    return pynq


class PynqDevice(Device):
    name = "pynq"

    def __init__(
        self,
        bitstream: str | Path,
        pynq: Any = None,
        timeout: float = 5.0,
        quiet_s: float = 0.005,
    ):
        bitstream = Path(bitstream)
        project = bitstream.parent
        try:
            self.manifest = json.loads((project / "manifest.json").read_text())
            graph = load(project / "graph.json")
        except OSError as exc:
            raise DeviceError(f"{bitstream} has no generated manifest.json/graph.json beside it: {exc}") from None
        super().__init__(place(graph))
        self._check_manifest()
        self.pynq = pynq if pynq is not None else import_pynq()
        self.timeout = timeout
        self.quiet_s = quiet_s
        try:
            self.overlay = self.pynq.Overlay(str(bitstream))
        except RuntimeError as exc:  # pynq on a machine with no board: "No Devices Found"
            raise DeviceError(f"cannot load {bitstream}: {exc}; without a board use --backend cpu") from None
        dma_name = self.manifest.get("dma", "axi_dma_0")
        try:
            self.dma = getattr(self.overlay, dma_name)
        except AttributeError:
            raise DeviceError(f"the overlay has no DMA named {dma_name!r}") from None
        bits = int(self.manifest.get("dma_length_bits", DEFAULT_LENGTH_BITS))
        self.max_transfer = ((1 << bits) - 1) // BEAT_BYTES * BEAT_BYTES
        largest = max(
            message_beats(kind, shape.max_rows, shape.width)
            for spec in self.channels.values() for kind, shape in spec.shapes.items()
        ) * BEAT_BYTES
        if largest > self.max_transfer:
            raise DeviceError(f"a message can be {largest} bytes, beyond the DMA's {self.max_transfer}")
        self.tx = self.pynq.allocate(shape=(self.max_transfer,), dtype=np.uint8)
        self.rx = self.pynq.allocate(shape=(largest,), dtype=np.uint8)
        self.decoder = StreamDecoder(self.channels)
        self._rx_armed = False

    def _check_manifest(self) -> None:
        """The host's channel numbering must be the one the bitstream was generated with."""
        mine = [(c.channel, c.name) for c in self.placement.channels]
        theirs = [(c["channel"], c["name"]) for c in self.manifest.get("channels", [])]
        if mine != theirs:
            raise DeviceError("manifest.json channels do not match graph.json: regenerate the project")

    # sending ----------------------------------------------------------------------------------
    def send(self, msgs: Sequence[WireMessage]) -> None:
        chunk = bytearray()
        for m in msgs:
            data = encode_bytes([m], self.channels)
            if len(chunk) + len(data) > self.max_transfer:
                self._transmit(bytes(chunk))
                chunk = bytearray()
            chunk += data
            self.counters.sent += 1
        if chunk:
            self._transmit(bytes(chunk))

    def _transmit(self, data: bytes) -> None:
        n = len(data)
        self.tx[:n] = np.frombuffer(data, dtype=np.uint8)
        _call(self.tx, "flush")
        self.dma.sendchannel.transfer(self.tx, nbytes=n)
        self._wait_idle(self.dma.sendchannel, "MM2S (host_in)")

    def _wait_idle(self, channel: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not channel.idle:
            if time.monotonic() > deadline:
                raise DeviceTimeout(f"DMA {what} transfer did not complete within {self.timeout} s")
            time.sleep(POLL_S)

    # receiving --------------------------------------------------------------------------------
    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        """Messages until the device has been quiet for ``quiet_s`` (or ``timeout`` passes)."""
        msgs: list[WireMessage] = []
        start = time.monotonic()
        last_activity = start
        while True:
            if not self._rx_armed:
                self.dma.recvchannel.transfer(self.rx)
                self._rx_armed = True
            now = time.monotonic()
            if self.dma.recvchannel.idle:
                n = self._transferred()
                _call(self.rx, "invalidate")
                msgs += self.decoder.feed(bytes(self.rx[:n]))
                self._rx_armed = False
                last_activity = now
                continue
            if now - last_activity > self.quiet_s or now - start > timeout:
                self.counters.received += len(msgs)
                return msgs
            time.sleep(POLL_S)

    def _transferred(self) -> int:
        n = getattr(self.dma.recvchannel, "transferred", None)
        if n is None:
            n = self.dma.mmio.read(S2MM_LENGTH)
        if n % BEAT_BYTES or n > len(self.rx):
            raise DeviceError(f"DMA S2MM reported {n} bytes, not whole beats within the buffer")
        return int(n)

    def reset(self) -> None:
        self.decoder = StreamDecoder(self.channels)
        self._rx_armed = False

    def close(self) -> None:
        for buf in (self.tx, self.rx):
            _call(buf, "freebuffer")


def _call(obj: Any, method: str) -> None:
    fn = getattr(obj, method, None)
    if fn is not None:
        fn()
