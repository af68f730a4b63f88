"""A simulated PYNQ: ``Overlay``, ``allocate`` and an AXI DMA in simple mode, whose far side is a
simulated device (the C simulation, or the RTL under Verilator) instead of a board.

It lets the real PYNQ driver (``host/pynq.py``) run end to end in CI, and it is as strict as
PYNQ and the hardware are. Two layers, as on a board:

- **the AXI DMA's registers** (PG021, simple mode): per channel DMACR (run/stop, reset), DMASR
  (halted, idle, internal error), the buffer address and LENGTH. Writing LENGTH starts a transfer;
  an MM2S transfer reads the buffer's memory and completes once the device has taken every beat
  (host_in back-pressure is real: the RTL takes beats as its FIFOs allow); an S2MM transfer takes
  host_out beats until TLAST, into memory, and then LENGTH holds the bytes received. A packet
  longer than the buffer is a DMA internal error (the channel halts). Idle reads 0 from the
  start of the channel until a transfer completes. Simulated time passes on every status read:
  polling is what lets the far side run, as the board runs while the host polls.
- **PYNQ's channel driver** (``pynq.lib.dma._SDMAChannel``, PYNQ 2.6 to 3.1 and 4.x, read from
  its source): ``transfer(array, start, nbytes)`` refuses a channel that is not idle (but for the
  first transfer), a length beyond the length register, an unaligned start (256 bytes on PYNQ
  3.x, whose check is ``1 << data width in bytes``; the data width, 8 bytes, on 4.x), flushes an
  MM2S buffer, and sets ``transferred`` to 0; ``idle`` and ``error`` read DMASR; only ``wait()``
  updates ``transferred`` (from LENGTH) and invalidates an S2MM buffer -- and ``wait()`` spins
  without a timeout, which here raises instead of hanging.

Buffers keep the CPU's view (the numpy array) apart from the memory the DMA sees: ``flush()``
writes the array to memory, ``invalidate()`` reads memory into the array, so a driver that
skips either reads or sends stale data, as on a Zynq. Changing an MM2S buffer while its
transfer runs is caught at completion.

Fault injection for the tests: ``SimDMA.stall()`` (the device stops), ``report_length(n)`` (the
next S2MM completion reports ``n`` bytes) and ``cut_packet(beats)`` (the next S2MM packet ends
after ``beats`` beats, inside a message).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..wire import BEAT_BYTES
from .device import DeviceError

PAGE = 4096
DMACR, DMASR, ADDR, ADDR_MSB, LENGTH = 0x00, 0x04, 0x18, 0x1C, 0x28  # per channel, S2MM at +0x30
S2MM_BASE = 0x30
SR_HALTED, SR_IDLE, SR_INTERNAL = 0x1, 0x2, 0x10
SR_ERRORS = 0x70
CR_RUN, CR_RESET = 0x1, 0x4
SPIN_LIMIT = 200_000  # status reads with no change before a wait() is declared endless
FAR_CYCLES = 20_000  # RTL cycles the far side runs per status read


class SimBuffer(np.ndarray):
    """What ``pynq.allocate`` returns: a numpy array (the CPU's view, through its cache) over
    physically contiguous memory (what the DMA reads and writes)."""

    physical_address: int
    memory: np.ndarray

    def flush(self) -> None:
        """CPU cache -> memory, as before an MM2S transfer."""
        self.memory[:] = self.view(np.uint8).reshape(-1)

    def invalidate(self) -> None:
        """memory -> the CPU's view, as after an S2MM transfer."""
        self.view(np.uint8).reshape(-1)[:] = self.memory

    def freebuffer(self) -> None:
        self.freed = True


class _Allocator:
    def __init__(self) -> None:
        self.next_address = 0x1000_0000
        self.buffers: list[SimBuffer] = []

    def __call__(self, shape: Any, dtype: Any = np.uint8, **_: Any) -> SimBuffer:
        buf = np.zeros(shape, dtype=dtype).view(SimBuffer)
        buf.physical_address = self.next_address
        buf.memory = np.zeros(buf.nbytes, dtype=np.uint8)
        buf.freed = False
        self.next_address += -(-max(buf.nbytes, 1) // PAGE) * PAGE
        self.buffers.append(buf)
        return buf

    def find(self, address: int, nbytes: int) -> tuple[SimBuffer, int]:
        for buf in self.buffers:
            if buf.physical_address <= address and address + nbytes <= buf.physical_address + buf.nbytes:
                if buf.freed:
                    raise RuntimeError(f"DMA to {address:#x}: the buffer was freed")
                return buf, address - buf.physical_address
        raise RuntimeError(f"DMA to {address:#x} (+{nbytes}): no allocated buffer there (a decode error on a board)")


allocate = _Allocator()  # module-level, as pynq.allocate


# ------------------------------------------------------------------------------- the far side


class _Far:
    """The device behind the DMA: host_in beats in, host_out beats out, time on demand."""

    def __init__(self, device: Any):
        self.device = device
        self.rtl = hasattr(device, "arm_out")  # RtlsimDevice (ready only while S2MM is armed)
        device.set_sticky(True)  # a board reports errors only on its control channel
        if self.rtl:
            device.stop_when_blocked(True)
            device.arm_out(0)
        self._data = np.zeros(0, dtype=np.uint64)  # host_out beats the DMA has taken, not yet
        self._last = np.zeros(0, dtype=bool)  # written to a buffer

    def push(self, beats: np.ndarray) -> None:
        last = np.zeros(len(beats), dtype=bool)
        last[-1] = True  # the DMA marks the end of the transfer only
        self.device.push_beats(beats, last)

    def tick(self) -> None:
        if self.rtl:
            self.device.run(FAR_CYCLES)
        else:
            self.device.settle(timeout=5.0)

    def taken(self) -> bool:
        """Whether the device has taken every host_in beat (the C simulation always has)."""
        return self.device.pending_in == 0 if self.rtl else True

    def arm(self, beats: int) -> None:
        if self.rtl:
            self.device.arm_out(beats)

    def disarm(self) -> None:
        if self.rtl:
            self.device.arm_out(0)

    def packet(self, capacity: int) -> tuple[np.ndarray, bool] | None:
        """The next S2MM packet (beats up to TLAST) once the device has given all of it: (beats,
        complete). The RTL gives no more than ``capacity`` beats (it is held off beyond); the C
        simulation's messages end in TLAST one by one (no packer: as the hls flow's bitstream)."""
        data, last = self.device.pop_beats()
        if len(data):
            self._data = np.concatenate([self._data, np.asarray(data, dtype=np.uint64)])
            self._last = np.concatenate([self._last, np.asarray(last, dtype=bool)])
        ends = np.flatnonzero(self._last[:capacity])
        if ends.size:
            k = int(ends[0]) + 1
        elif len(self._data) >= capacity:
            k = capacity
        else:
            return None
        beats, complete = self._data[:k], bool(self._last[k - 1])
        self._data, self._last = self._data[k:], self._last[k:]
        return beats, complete


class _Channel:
    """One channel of the DMA's register model."""

    def __init__(self, dma: SimDMA, tx: bool):
        self.dma = dma
        self.tx = tx
        self.cr = 0
        self.sr = SR_HALTED
        self.addr = 0
        self.length = 0
        self.active = False
        self.buffer: SimBuffer | None = None
        self.offset = 0
        self.sent: np.ndarray | None = None  # MM2S: the bytes read at the start

    def write(self, reg: int, value: int) -> None:
        if reg == DMACR:
            if value & CR_RESET:
                self.dma.reset_channels()
                return
            self.cr = value
            if value & CR_RUN:
                self.sr &= ~SR_HALTED
            else:
                self.sr |= SR_HALTED
                self.active = False
        elif reg == ADDR:
            self.addr = (self.addr & ~0xFFFF_FFFF) | value
        elif reg == ADDR_MSB:
            self.addr = (self.addr & 0xFFFF_FFFF) | (value << 32)
        elif reg == LENGTH:
            self.start(value)
        else:
            raise RuntimeError(f"DMA register {reg:#x} is not simulated")

    def read(self, reg: int) -> int:
        if reg == DMASR:
            self.dma.tick()
            return self.sr
        if reg == LENGTH:
            return self.length
        if reg == DMACR:
            return self.cr
        raise RuntimeError(f"DMA register {reg:#x} is not simulated")

    def start(self, nbytes: int) -> None:
        if self.sr & SR_HALTED or self.sr & SR_ERRORS:
            return  # a halted channel ignores LENGTH (PG021)
        if nbytes == 0 or nbytes > self.dma.max_size:
            self.error(SR_INTERNAL)
            return
        self.buffer, self.offset = allocate.find(self.addr, nbytes)
        self.length = nbytes
        self.sr &= ~SR_IDLE
        self.active = True
        if self.tx:
            raw = self.buffer.memory[self.offset:self.offset + nbytes]
            if nbytes % BEAT_BYTES:  # the stream is 64 bits wide: the last beat would be partial
                self.error(SR_INTERNAL)
                return
            self.sent = raw.copy()
            if not self.dma.stalled:
                self.dma.far.push(np.frombuffer(raw.tobytes(), dtype="<u8"))
        else:
            self.dma.far.arm(nbytes // BEAT_BYTES)

    def error(self, bits: int) -> None:
        self.sr |= bits | SR_HALTED
        self.active = False

    def complete(self) -> None:
        self.active = False
        self.sr |= SR_IDLE


class SimDMA:
    """The AXI DMA of the simulated overlay (``overlay.dma``): PYNQ's driver (``sendchannel``,
    ``recvchannel``, ``buffer_max_size``) over the register model (``mmio``)."""

    def __init__(self, far: Any, length_bits: int = 26, pynq_version: int = 4):
        self.far = _Far(far)
        self.max_size = (1 << length_bits) - 1
        self.buffer_max_size = self.max_size  # as pynq.lib.dma.DMA has it
        self.pynq_version = pynq_version
        self.mm2s = _Channel(self, tx=True)
        self.s2mm = _Channel(self, tx=False)
        self.mmio = SimMMIO(self)
        self.stalled = False
        self._length_override: int | None = None
        self._cut: int | None = None
        self._ticking = False
        align = 1 << BEAT_BYTES if pynq_version < 4 else BEAT_BYTES  # PYNQ 3.x: 1 << int(width)
        self.sendchannel = SimSDMAChannel(self.mmio, 0x0, self.max_size, align, tx=True)
        self.recvchannel = SimSDMAChannel(self.mmio, S2MM_BASE, self.max_size, align, tx=False)
        self.transfers = {"mm2s": 0, "s2mm": 0}

    # fault injection ------------------------------------------------------------------------
    def stall(self) -> None:
        """The device stops: nothing is taken from host_in or given on host_out any more."""
        self.stalled = True

    def report_length(self, nbytes: int) -> None:
        """The next S2MM completion reports ``nbytes`` in LENGTH."""
        self._length_override = nbytes

    def cut_packet(self, beats: int) -> None:
        """The next S2MM packet ends after ``beats`` beats, wherever that is."""
        self._cut = beats

    # the hardware ---------------------------------------------------------------------------
    def reset_channels(self) -> None:
        for ch in (self.mm2s, self.s2mm):
            ch.cr, ch.sr, ch.active, ch.length = 0, SR_HALTED, False, 0
        self.far.disarm()

    def tick(self) -> None:
        """Simulated time passes: the device runs, the active transfers move on."""
        if self._ticking or self.stalled:
            return
        self._ticking = True
        try:
            self.far.tick()
            mm2s, s2mm = self.mm2s, self.s2mm
            if mm2s.active and self.far.taken():
                assert mm2s.buffer is not None and mm2s.sent is not None
                now = mm2s.buffer.memory[mm2s.offset:mm2s.offset + mm2s.length]
                if not np.array_equal(now, mm2s.sent):
                    raise RuntimeError("an MM2S buffer was changed (and flushed) while its transfer ran")
                mm2s.complete()
                self.transfers["mm2s"] += 1
            if s2mm.active:
                capacity = s2mm.length // BEAT_BYTES
                if self._cut is not None:
                    capacity = min(capacity, self._cut)
                got = self.far.packet(capacity)
                if got is not None:
                    beats, complete = got
                    if self._cut is not None and len(beats) == self._cut:
                        complete, self._cut = True, None
                    if not complete:  # the packet goes on beyond the buffer
                        s2mm.error(SR_INTERNAL)
                        self.far.disarm()
                    else:
                        assert s2mm.buffer is not None
                        raw = np.frombuffer(beats.astype("<u8").tobytes(), dtype=np.uint8)
                        s2mm.buffer.memory[s2mm.offset:s2mm.offset + len(raw)] = raw
                        s2mm.length = len(raw) if self._length_override is None else self._length_override
                        self._length_override = None
                        s2mm.complete()
                        self.far.disarm()
                        self.transfers["s2mm"] += 1
        finally:
            self._ticking = False


class SimMMIO:
    """The DMA's AXI-lite registers (``dma.mmio``)."""

    def __init__(self, dma: SimDMA):
        self.dma = dma

    def _channel(self, offset: int) -> tuple[_Channel, int]:
        if offset >= S2MM_BASE:
            return self.dma.s2mm, offset - S2MM_BASE
        return self.dma.mm2s, offset

    def read(self, offset: int, length: int = 4) -> int:
        ch, reg = self._channel(offset)
        return ch.read(reg)

    def write(self, offset: int, value: int) -> None:
        ch, reg = self._channel(offset)
        ch.write(reg, int(value))


class SimSDMAChannel:
    """PYNQ's simple-mode channel driver (``pynq.lib.dma._SDMAChannel``), the same behaviour
    over the simulated registers."""

    def __init__(self, mmio: SimMMIO, offset: int, max_size: int, align: int, tx: bool):
        self._mmio = mmio
        self._offset = offset
        self._max_size = max_size
        self._align = align
        self._flush_before = tx
        self._active_buffer: SimBuffer | None = None
        self._first_transfer = True
        self.transferred = 0
        self.start()

    @property
    def running(self) -> bool:
        return self._mmio.read(self._offset + DMASR) & SR_HALTED == 0

    @property
    def idle(self) -> bool:
        return self._mmio.read(self._offset + DMASR) & SR_IDLE == SR_IDLE

    @property
    def error(self) -> bool:
        return self._mmio.read(self._offset + DMASR) & SR_ERRORS != 0

    def start(self) -> None:
        self._mmio.write(self._offset + DMACR, CR_RUN)
        if not self.running:
            raise RuntimeError("DMA channel did not start")
        self._first_transfer = True

    def stop(self) -> None:
        self._mmio.write(self._offset + DMACR, 0)

    def transfer(self, array: np.ndarray, start: int = 0, nbytes: int = 0) -> None:
        if not isinstance(array, SimBuffer):
            raise RuntimeError("DMA transfers need a buffer from allocate() (physically contiguous)")
        if not self.running:
            raise RuntimeError("DMA channel not started")
        if not self.idle and not self._first_transfer:
            raise RuntimeError("DMA channel not idle")
        if nbytes == 0:
            nbytes = array.nbytes - start
        if nbytes > self._max_size:
            raise ValueError(f"Transfer size is {nbytes} bytes, which exceeds the maximum DMA buffer size {self._max_size}.")
        if (array.physical_address + start) % self._align:
            raise RuntimeError(f"DMA does not support unaligned transfers; Starting address must be aligned to {self._align} bytes.")
        if start + nbytes > array.nbytes:
            raise RuntimeError(f"a transfer of {nbytes} bytes from offset {start} runs past the {array.nbytes}-byte buffer")
        if self._flush_before:
            array.flush()
        self.transferred = 0
        self._mmio.write(self._offset + ADDR, (array.physical_address + start) & 0xFFFF_FFFF)
        self._mmio.write(self._offset + ADDR_MSB, (array.physical_address + start) >> 32)
        self._mmio.write(self._offset + LENGTH, nbytes)
        self._active_buffer = array
        self._first_transfer = False

    def wait(self) -> None:
        """As pynq's: spin until idle, raising on an error -- without a timeout, so a transfer
        that cannot complete raises here rather than hang."""
        if not self.running:
            raise RuntimeError("DMA channel not started")
        for _ in range(SPIN_LIMIT):
            status = self._mmio.read(self._offset + DMASR)
            if status & SR_ERRORS:
                if status & SR_INTERNAL:
                    raise RuntimeError("DMA Internal Error (transfer length 0?)")
                raise RuntimeError("DMA error")
            if status & SR_IDLE:
                break
        else:
            raise RuntimeError("wait() on a transfer that does not complete: pynq's wait() would spin forever here")
        if not self._flush_before and self._active_buffer is not None:
            self._active_buffer.invalidate()
        self.transferred = self._mmio.read(self._offset + LENGTH)
        self._active_buffer = None


class SimOverlay:
    def __init__(self, dma: SimDMA, dma_name: str = "axi_dma_0"):
        setattr(self, dma_name, dma)


class SimPynq:
    """Stands in for the ``pynq`` module: ``Overlay(path)`` and ``allocate``. Loading the overlay
    again (a driver's hard reset) resets the far side and the DMA."""

    def __init__(self, far: Any, length_bits: int = 26, dma_name: str = "axi_dma_0", pynq_version: int = 4):
        self.far = far
        self.length_bits = length_bits
        self.pynq_version = pynq_version
        self.dma = SimDMA(far, length_bits, pynq_version)
        self.dma_name = dma_name
        self.allocate = allocate
        self.overlays = 0

    def Overlay(self, path: str) -> SimOverlay:  # noqa: N802 - the pynq name
        self.overlays += 1
        if self.overlays > 1:  # reprogramming the fabric: everything starts again
            self.far.reset()
            self.dma = SimDMA(self.far, self.length_bits, self.pynq_version)
        return SimOverlay(self.dma, self.dma_name)


__all__ = ["DeviceError", "SimBuffer", "SimDMA", "SimOverlay", "SimPynq", "allocate"]
