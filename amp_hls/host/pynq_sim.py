"""A simulated PYNQ: ``Overlay``, ``allocate`` and an AXI DMA with pynq's buffer and channel
semantics, whose far side is a simulated device (the C simulation) instead of a board.

It lets the real PYNQ driver (``host/pynq.py``) run end to end in CI, and it is strict where the
hardware is unforgiving: transfers must use buffers from ``allocate``, lengths must be whole
64-bit beats within the DMA's length register, a packet larger than the receive buffer is an
error, and ``wait()`` on a transfer that can never finish raises instead of hanging.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from ..wire import BEAT_BYTES
from .csim import CsimDevice


class SimBuffer(np.ndarray):
    """What ``pynq.allocate`` returns: a numpy array with cache maintenance methods."""

    physical_address = 0x1000_0000

    def flush(self) -> None:
        pass

    def invalidate(self) -> None:
        pass

    def freebuffer(self) -> None:
        pass


def allocate(shape: Any, dtype: Any = np.uint8) -> SimBuffer:
    return np.zeros(shape, dtype=dtype).view(SimBuffer)


class _SendChannel:
    def __init__(self, dma: SimDMA):
        self.dma = dma
        self._idle = True
        self.transfers = 0

    @property
    def idle(self) -> bool:
        return self._idle and not self.dma.stalled

    def transfer(self, array: np.ndarray, start: int = 0, nbytes: int = 0) -> None:
        buf = self.dma.check_buffer(array)
        nbytes = nbytes or buf.nbytes - start
        if nbytes % BEAT_BYTES or not 0 < nbytes <= self.dma.max_length:
            raise RuntimeError(f"MM2S length {nbytes} is not whole beats within {self.dma.max_length}")
        beats = np.frombuffer(buf.view(np.uint8)[start : start + nbytes].tobytes(), dtype="<u8")
        last = np.zeros(len(beats), dtype=bool)
        last[-1] = True  # the DMA marks only the end of the transfer
        self.transfers += 1
        if not self.dma.stalled:
            self.dma.far.push_beats(beats, last)

    def wait(self) -> None:
        pass


class _RecvChannel:
    def __init__(self, dma: SimDMA):
        self.dma = dma
        self._buf: np.ndarray | None = None
        self.transferred = 0

    def transfer(self, array: np.ndarray, start: int = 0, nbytes: int = 0) -> None:
        self._buf = self.dma.check_buffer(array)
        self._start = start
        self._capacity = nbytes or self._buf.nbytes - start
        self.transferred = 0

    @property
    def idle(self) -> bool:
        """Completes the armed transfer if a whole packet (up to TLAST) is waiting."""
        if self._buf is None:
            return True
        if self.dma.stalled:
            return False
        packet = self.dma.next_packet()
        if packet is None:
            return False
        raw = packet.astype("<u8").tobytes()
        if len(raw) > self._capacity:
            raise RuntimeError(f"S2MM packet of {len(raw)} bytes overflows a {self._capacity}-byte buffer")
        self._buf.view(np.uint8)[self._start : self._start + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        self.transferred = len(raw)
        self._buf = None
        return True

    def wait(self) -> None:
        if not self.idle:
            raise RuntimeError("S2MM wait() on a transfer that cannot complete: pynq would hang here")


class _Mmio:
    def __init__(self, dma: SimDMA):
        self.dma = dma

    def read(self, offset: int) -> int:
        if offset == 0x58:  # S2MM_LENGTH
            return self.dma.recvchannel.transferred
        raise RuntimeError(f"register 0x{offset:x} is not simulated")


class SimDMA:
    def __init__(self, far: CsimDevice, length_bits: int = 26):
        self.far = far
        self.max_length = (1 << length_bits) - 1
        self.sendchannel = _SendChannel(self)
        self.recvchannel = _RecvChannel(self)
        self.mmio = _Mmio(self)
        self._beats: deque[tuple[int, bool]] = deque()
        self.stalled = False  # fault injection: the device stops answering

    def stall(self) -> None:
        self.stalled = True

    def check_buffer(self, array: np.ndarray) -> SimBuffer:
        if not isinstance(array, SimBuffer):
            raise RuntimeError("DMA transfers need a buffer from allocate() (physically contiguous)")
        return array

    def next_packet(self) -> np.ndarray | None:
        """The beats up to and including the next TLAST on host_out, once they are all there."""
        self.far.settle(timeout=5.0)
        data, last = self.far.pop_beats()
        self._beats.extend(zip(data.tolist(), last.tolist()))
        for i, (_, is_last) in enumerate(self._beats):
            if is_last:
                return np.array([self._beats.popleft()[0] for _ in range(i + 1)], dtype=np.uint64)
        return None


class SimOverlay:
    def __init__(self, dma: SimDMA, dma_name: str = "axi_dma_0"):
        setattr(self, dma_name, dma)


class SimPynq:
    """Stands in for the ``pynq`` module: ``Overlay(path)`` and ``allocate``."""

    def __init__(self, far: CsimDevice, length_bits: int = 26, dma_name: str = "axi_dma_0"):
        self.dma = SimDMA(far, length_bits)
        self.dma_name = dma_name
        self.allocate = allocate

    def Overlay(self, path: str) -> SimOverlay:  # noqa: N802 - the pynq name
        return SimOverlay(self.dma, self.dma_name)
