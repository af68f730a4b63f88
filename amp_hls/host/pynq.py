"""The PYNQ board backend: a generated bitstream driven over its AXI DMA (docs/board.md).

``pynq`` is imported only when a board is used (the ``pynq`` extra); without it, or without a
board, the error says so and suggests ``--backend cpu``. It is written against PYNQ's simple-mode
DMA channel (``pynq.lib.dma._SDMAChannel``, the same in PYNQ 2.6 to 3.1 and 4.x):
``transfer()`` sets ``transferred`` to 0 and only ``wait()`` reads the length the DMA reports;
``idle`` and ``error`` read the status register; ``wait()`` itself spins with no timeout. So every
wait here polls ``idle`` (and ``error``) against a deadline and calls ``wait()`` only once the
channel is idle, where it returns at once with ``transferred`` set and the buffer invalidated.

Sending: the messages are packed back to back into transfers of at most the transmit buffer
(``host_link.tx_buffer_bytes`` of the manifest, within the DMA's length register); host_in's
message boundaries come from the headers, so a message larger than one transfer goes in several.
Two transmit buffers alternate, so the next transfer is filled while one runs. While a transfer
waits for the device to take it, the receive side is served: a device whose host_out is not
drained stops taking host_in, and the host would wait for ever.

Receiving: an S2MM transfer is armed at all times (two receive buffers alternate, re-armed the
moment one completes), and completes at host_out's TLAST. The rtl flow's bitstream ends a packet
at a message boundary after many messages (``amp_pack``), the hls flow's after every message;
either way the bytes are fed to one ``StreamDecoder``. A length that is not whole beats, beyond
the buffer, or a packet that ends inside a message without filling the buffer (the one case
where a packet may: a message longer than the buffer) is a ``DeviceError``. Nothing waits for a
fixed silence: ``poll`` returns what has arrived, waiting for a first message only while
instances are in flight, and then, after ``probe_s`` of silence, asks the control channel for
the device's status, so a kernel error is reported at once instead of after ``timeout``.

Status and reset: a bitstream of the rtl flow has the control unit (``amp_hls.control``): its
STATS report the kernels' error flags and saturation count, RESET clears the kernels and keeps
the weights. A bitstream of the hls flow has none; its reset loads the overlay again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ..control import DeviceStatus, Op, ctrl_message, is_stats, parse_stats
from ..design import DeviceOptions
from ..errors import AmpHlsError, WireError
from ..ir import load
from ..placement import place
from ..wire import (
    BEAT_BYTES,
    Kind,
    StreamDecoder,
    WireMessage,
    decode_many,
    encode_many,
    message_beats,
)
from .device import Device, DeviceError, DeviceTimeout
from .settings import DeviceSettings

S2MM_LENGTH = 0x58  # AXI DMA register: bytes written by the last S2MM transfer (PG021)
DEFAULT_LENGTH_BITS = 26
BUFFER_MIN = 64 * 1024
POLL_S = 20e-6


def import_pynq() -> ModuleType:
    try:
        import pynq
    except ImportError:
        raise DeviceError(
            "the pynq backend needs the pynq package (pip install 'amp-hls[pynq]') and a board; "
            "without one, train with --backend cpu (or numpy-device / csim)"
        ) from None
    return pynq


def find_bitstream(path: str | Path) -> tuple[Path, Path]:
    """(the bitstream, its project or deployment folder) for a ``.bit`` file or a folder that
    holds one with its manifest.json."""
    path = Path(path)
    if path.is_dir():
        try:
            manifest = json.loads((path / "manifest.json").read_text())
            bit = path / manifest["bitstream"]["bit"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DeviceError(f"{path} holds no generated project or deployment (manifest.json with a "
                              f"bitstream entry): {exc}") from None
        return bit, path
    return path, path.parent


class PynqDevice(Device):
    name = "pynq"

    def __init__(
        self,
        bitstream: str | Path,
        pynq: Any = None,
        timeout: float = 5.0,
        probe_s: float = 0.05,
        quiet_s: float = 0.002,
    ):
        bit, project = find_bitstream(bitstream)
        try:
            self.manifest = json.loads((project / "manifest.json").read_text())
            graph = load(project / "graph.json")
        except OSError as exc:
            raise DeviceError(f"{bit} has no generated manifest.json/graph.json beside it: {exc}") from None
        super().__init__(place(graph))
        self.project = project
        self.bitstream = bit
        self._check_manifest()
        entry = self.manifest.get("bitstream") or {}
        self.flow = entry.get("flow", "hls")  # manifests before the rtl flow: the hls flow's
        self.supports_control = bool(entry.get("control", False))
        self.pynq = pynq if pynq is not None else import_pynq()
        self.timeout = timeout
        self.probe_s = probe_s
        self.quiet_s = quiet_s
        bits = int(self.manifest.get("dma_length_bits", DEFAULT_LENGTH_BITS))
        self.max_transfer = ((1 << bits) - 1) // BEAT_BYTES * BEAT_BYTES
        link = self.manifest.get("host_link") or self._default_link()
        self.tx_bytes = min(self.max_transfer, int(link["tx_buffer_bytes"])) // BEAT_BYTES * BEAT_BYTES
        self.rx_bytes = min(self.max_transfer, int(link["rx_buffer_bytes"])) // BEAT_BYTES * BEAT_BYTES
        if self.flow == "rtl" and int(link.get("packet_limit_beats", 0)) * BEAT_BYTES > self.rx_bytes:
            raise DeviceError(f"the bitstream's host_out packets can be {int(link['packet_limit_beats']) * BEAT_BYTES} "
                              f"bytes, beyond the {self.rx_bytes}-byte receive buffer the DMA allows: regenerate the project")
        if self.flow != "rtl":
            largest = self._largest_out()
            if largest > self.rx_bytes:  # no packer: a message is one S2MM transfer
                raise DeviceError(f"a message from the device can be {largest} bytes, beyond the DMA's "
                                  f"{self.rx_bytes}-byte receive: the hls flow cannot receive it (use --flow rtl)")
        self._load_overlay()
        self.tx = [self.pynq.allocate(shape=(self.tx_bytes,), dtype=np.uint8) for _ in range(2)]
        self.rx = [self.pynq.allocate(shape=(self.rx_bytes,), dtype=np.uint8) for _ in range(2)]
        self._start_link()

    # set-up -----------------------------------------------------------------------------------
    def _check_manifest(self) -> None:
        """The host's channel numbering must be the one the bitstream was generated with."""
        mine = [(c.channel, c.name) for c in self.placement.channels]
        theirs = [(c.get("channel"), c.get("name")) for c in self.manifest.get("channels", [])]
        if mine != theirs:
            raise DeviceError("manifest.json channels do not match graph.json: regenerate the project")

    @property
    def options(self) -> DeviceOptions:
        """What the bitstream fixes (numerics, muf, cache slots, instances in flight)."""
        try:
            return DeviceOptions.from_json(self.manifest)
        except (KeyError, TypeError, AmpHlsError) as exc:
            raise DeviceError(f"{self.project}/manifest.json does not say what the bitstream fixes: {exc}") from None

    @property
    def settings(self) -> DeviceSettings:
        return DeviceSettings.of(self.options, f"the bitstream {self.bitstream}")

    def _largest_out(self) -> int:
        beats = 0
        for c in self.placement.channels:
            for kind, shape in c.spec.shapes.items():
                if kind is Kind.GRADS or (kind is Kind.DATA and c.edge is not None):
                    beats = max(beats, message_beats(kind, shape.max_rows, shape.width))
        return beats * BEAT_BYTES

    def _default_link(self) -> dict[str, int]:
        """A manifest from before ``host_link``: buffers from the largest messages."""
        largest = max(message_beats(kind, shape.max_rows, shape.width)
                      for c in self.placement.channels for kind, shape in c.spec.shapes.items()) * BEAT_BYTES
        size = max(BUFFER_MIN, 2 * largest)
        return {"tx_buffer_bytes": size, "rx_buffer_bytes": size}

    def _load_overlay(self) -> None:
        try:
            self.overlay = self.pynq.Overlay(str(self.bitstream))
        except RuntimeError as exc:  # pynq on a machine with no board: "No Devices Found"
            raise DeviceError(f"cannot load {self.bitstream}: {exc}; without a board use --backend cpu") from None
        dma_name = self.manifest.get("dma", "axi_dma_0")
        try:
            self.dma = getattr(self.overlay, dma_name)
        except AttributeError:
            raise DeviceError(f"the overlay has no DMA named {dma_name!r}") from None
        theirs = getattr(self.dma, "buffer_max_size", None)
        if theirs is not None and int(theirs) // BEAT_BYTES * BEAT_BYTES < self.max_transfer:
            raise DeviceError(f"the overlay's DMA takes {int(theirs)} bytes a transfer, the manifest says "
                              f"{self.max_transfer}: the bitstream is not this project's")

    def _start_link(self) -> None:
        self.decoder = StreamDecoder(self.channels)
        self._tx_next = 0  # the transmit buffer to fill next
        self._tx_active = False  # an MM2S transfer is running
        self._rx_next = 0  # the receive buffer armed
        self._rx_armed = False
        self._inbox: list[WireMessage] = []  # received, not yet handed out
        self._probe: int | None = None  # the key of a STATUS probe in flight
        self._arm_rx()

    # the DMA's channels, every wait bounded -----------------------------------------------------
    def _check_channel(self, channel: Any, what: str) -> None:
        if getattr(channel, "error", False):
            raise DeviceError(f"the DMA's {what} channel is in an error state (status {self._status(channel)})")

    def _status(self, channel: Any) -> str:
        mmio = getattr(self.dma, "mmio", None)
        offset = getattr(channel, "_offset", None)
        if mmio is None or offset is None:
            return "unknown"
        return f"{mmio.read(offset + 4):#x}"

    def _finish(self, channel: Any, what: str) -> None:
        """``wait()`` on an idle channel: returns at once, sets ``transferred``, and raises on
        a DMA error (pynq's own messages)."""
        try:
            channel.wait()
        except RuntimeError as exc:
            raise DeviceError(f"DMA {what}: {exc}") from None

    def _arm_rx(self) -> None:
        buf = self.rx[self._rx_next]
        try:
            self.dma.recvchannel.transfer(buf)
        except (RuntimeError, ValueError) as exc:
            raise DeviceError(f"DMA S2MM (host_out) transfer refused: {exc}") from None
        self._rx_armed = True

    def _harvest(self) -> bool:
        """Take a completed S2MM transfer, if there is one, re-arming the other buffer first."""
        channel = self.dma.recvchannel
        if not self._rx_armed:
            self._arm_rx()
        if not channel.idle:
            self._check_channel(channel, "S2MM (host_out)")
            return False
        self._finish(channel, "S2MM (host_out)")
        n = int(channel.transferred)
        buf = self.rx[self._rx_next]
        self._rx_next ^= 1
        self._rx_armed = False
        self._arm_rx()  # host_out flows on while this buffer is decoded
        if n <= 0 or n % BEAT_BYTES or n > len(buf):
            raise DeviceError(f"DMA S2MM reported {n} bytes: not whole beats within the {len(buf)}-byte buffer")
        packet = memoryview(buf)[:n]
        msgs = None
        if not self.decoder.pending_bytes and n < len(buf):  # whole messages: decoded as arrays
            try:
                msgs = decode_many(packet, self.channels)
            except WireError:
                msgs = None  # the incremental decoder says what is wrong
        if msgs is None:
            try:
                msgs = self.decoder.feed(packet)
            except WireError as exc:
                raise DeviceError(f"host_out: {exc}") from None
        if self.decoder.pending_bytes and n != len(buf):
            raise DeviceError(f"a {n}-byte host_out packet ended inside a message ({self.decoder.pending_bytes} "
                              "bytes of it): packets end on message boundaries unless they fill the receive buffer")
        for m in msgs:
            self._route(m)
        return True

    def _route(self, m: WireMessage) -> None:
        if is_stats(m) and m.tag.key == self._probe:  # our own probe's answer
            self._probe = None
            status = parse_stats(m)
            if status.faulty:
                raise self.fault(status)
            return
        self._inbox.append(m)

    def _wait_tx(self) -> None:
        """The running MM2S transfer to its end, serving S2MM meanwhile."""
        if not self._tx_active:
            return
        channel = self.dma.sendchannel
        deadline = time.monotonic() + self.timeout
        while not channel.idle:
            self._check_channel(channel, "MM2S (host_in)")
            if not self._harvest():
                if time.monotonic() > deadline:
                    raise DeviceTimeout(f"DMA MM2S (host_in) transfer did not complete within {self.timeout} s: "
                                        "the device stopped taking input")
                time.sleep(POLL_S)
        self._finish(channel, "MM2S (host_in)")
        self._tx_active = False

    def _transmit(self, data: memoryview) -> None:
        buf = self.tx[self._tx_next]
        n = len(data)
        buf[:n] = np.frombuffer(data, dtype=np.uint8)  # filled while the other buffer's transfer runs
        self._wait_tx()
        try:
            self.dma.sendchannel.transfer(buf, nbytes=n)  # flushes the buffer, as pynq does for MM2S
        except (RuntimeError, ValueError) as exc:
            raise DeviceError(f"DMA MM2S (host_in) transfer refused: {exc}") from None
        self._tx_active = True
        self._tx_next ^= 1

    # the Device interface -------------------------------------------------------------------------
    def send(self, msgs: Sequence[WireMessage]) -> None:
        """Pack ``msgs`` into transfers of at most ``tx_bytes``: whole messages where they fit, a
        larger message in ``tx_bytes`` pieces. Returns once the last transfer has started."""
        if not msgs:
            return
        data = memoryview(encode_many(msgs, self.channels))  # checked; contiguous, in order
        size = self.tx_bytes
        lo = hi = 0
        for m in msgs:
            n = message_beats(m.kind, m.payload.shape[0], m.payload.shape[1]) * BEAT_BYTES
            if hi > lo and hi + n - lo > size:  # the transfer is full: send what it holds
                self._transmit(data[lo:hi])
                lo = hi
            hi += n
            while hi - lo > size:  # a message larger than a transfer: whole transfers of it
                self._transmit(data[lo:lo + size])
                lo += size
        if hi > lo:
            self._transmit(data[lo:hi])
        self.counters.sent += len(msgs)
        self.counters.weights_loads += sum(m.kind is Kind.WEIGHTS for m in msgs)

    def _take(self) -> list[WireMessage]:
        out, self._inbox = self._inbox, []
        self.counters.received += len(out)
        self.counters.grads_dumps += sum(m.kind is Kind.GRADS for m in out)
        return out

    def _serve(self) -> None:
        if self._tx_active and self.dma.sendchannel.idle:
            self._finish(self.dma.sendchannel, "MM2S (host_in)")
            self._tx_active = False
        while self._harvest():
            pass

    def poll(self, timeout: float, expect: bool) -> list[WireMessage]:
        """What has arrived; with ``expect`` (instances in flight), wait up to ``timeout`` for a
        first message, asking for the device's status after ``probe_s`` of silence."""
        self._serve()
        if self._inbox or not expect:
            return self._take()
        start = time.monotonic()
        quiet_since = start
        while True:
            if self._harvest():
                self._serve()
                if self._inbox:
                    return self._take()
                quiet_since = time.monotonic()
            now = time.monotonic()
            if now - start > timeout:
                raise DeviceTimeout(f"no message from the device within {timeout} s with instances in flight")
            if self.supports_control and self._probe is None and now - quiet_since > self.probe_s:
                self._ctrl_key = (self._ctrl_key + 1) & 0xFFFF_FFFF
                self._probe = self._ctrl_key
                self.send([ctrl_message(Op.STATUS, self._probe)])
                quiet_since = now
            time.sleep(POLL_S)

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        """Everything the device sends until it has been quiet for ``quiet_s`` (within
        ``timeout``): for a caller that cannot tell whether more is coming."""
        start = time.monotonic()
        quiet_since, seen = start, -1
        while True:
            self._serve()
            if len(self._inbox) != seen:
                quiet_since, seen = time.monotonic(), len(self._inbox)
            now = time.monotonic()
            if now - quiet_since > self.quiet_s or now - start > timeout:
                return self._take()
            time.sleep(POLL_S)

    def reset(self) -> None:
        """Back to power-on state, weights kept: the control unit's soft reset (the rtl flow), or
        the overlay loaded again (the hls flow, whose kernels have no reset: weights are lost
        too, so the host must send them again). A DMA left in an error state is reset first."""
        _, _, after = self.recover(self.timeout)
        self._inbox.extend(after)

    def recover(self, timeout: float = 5.0) -> tuple[DeviceStatus | None, int, list[WireMessage]]:
        if not self.supports_control:
            self._load_overlay()
            self._start_link()
            return None, 0, []
        if getattr(self.dma.sendchannel, "error", False) or getattr(self.dma.recvchannel, "error", False):
            self.dma.mmio.write(0x00, 0x4)  # PG021: DMACR bit 2 resets both channels of the DMA
            self.dma.sendchannel.start()
            self.dma.recvchannel.start()
            self._start_link()
        else:
            try:
                self._serve()
            except DeviceError:
                pass  # what the device sent before the reset is dropped anyway
            self._inbox.clear()
            if not self.decoder.pending_bytes:  # at a message boundary: a fresh decoder (one that
                self.decoder = StreamDecoder(self.channels)  # failed refuses all further input)
        return self.soft_reset(timeout)

    def close(self) -> None:
        for buf in (*self.tx, *self.rx):
            fn = getattr(buf, "freebuffer", None)
            if fn is not None:
                fn()
