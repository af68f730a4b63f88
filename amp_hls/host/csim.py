"""The C-simulation device: the generated HLS C++ built with g++ and loaded through ctypes.

Each build gets a fresh library name (a content hash), so rebuilding a project and loading it
again in the same process picks up the new code. A compiler failure surfaces the compiler's own
message; a kernel error (a protocol violation, a full tag table) surfaces the kernel's message.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import toolchain
from ..codegen.hls import HlsProject
from ..wire import WireMessage, decode_beats, encode_beats
from .device import Device, DeviceError, DeviceTimeout
from .settings import DeviceSettings

# HLS pragmas are meant for Vitis; g++ is told to ignore them, and every other warning is an error.
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas")
ROUNDS_PER_CALL = 20_000


class CompileError(DeviceError):
    """g++ rejected the generated sources; the message is the compiler's."""


def build_csim(project: HlsProject, compiler: str = "g++", timeout: float = 600.0) -> Path:
    """Compile the project's C simulation into ``build/libamp_csim_<hash>.so`` (cached)."""
    toolchain.require(compiler, CompileError, f"C simulation needs a C++ compiler; {compiler!r} was not found on PATH")
    sources = list(project.csim_sources)
    headers = sorted(project.include_dir.glob("*.h"))
    key = toolchain.build_key([*sources, *headers], *CXXFLAGS)

    def compile_(library: Path) -> None:
        cmd = [compiler, *CXXFLAGS, f"-I{project.include_dir}", "-o", str(library), *map(str, sources)]
        result = toolchain.run_tool(cmd, timeout, CompileError, f"g++ did not finish within {timeout:.0f} s")
        if result.returncode != 0:
            raise CompileError(f"g++ failed to build the C simulation:\n{result.stderr.strip()}")

    return toolchain.cached_build(project.root / "build" / f"libamp_csim_{key}.so", compile_)


class CsimDevice(Device):
    name = "csim"

    def __init__(self, project: HlsProject, library: Path | None = None, sticky: bool = False):
        super().__init__(project.placement)
        self.project = project
        self.library_path = library if library is not None else build_csim(project)
        lib = ctypes.CDLL(str(self.library_path))
        u64p, u8p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint8)
        lib.amp_push.argtypes = [u64p, u8p, ctypes.c_int]
        lib.amp_push.restype = ctypes.c_int
        lib.amp_run.argtypes = [ctypes.c_long]
        lib.amp_run.restype = ctypes.c_long
        lib.amp_pop.argtypes = [u64p, u8p, ctypes.c_int]
        lib.amp_pop.restype = ctypes.c_int
        lib.amp_pending_out.restype = ctypes.c_int
        lib.amp_error.restype = ctypes.c_char_p
        lib.amp_saturations.restype = ctypes.c_ulonglong
        lib.amp_pending_in.restype = ctypes.c_int
        lib.amp_set_sticky.argtypes = [ctypes.c_int]
        self._lib = lib
        lib.amp_reset()
        self.set_sticky(sticky)

    def set_sticky(self, on: bool) -> None:
        """on: a kernel error only sets its flag (a CTRL STATUS reads it), as on hardware; off:
        it is also a DeviceError with the kernel's message."""
        self._lib.amp_set_sticky(int(on))
        self.sticky = on

    def send(self, msgs: Sequence[WireMessage]) -> None:
        for m in msgs:
            self.push_beats(*encode_beats(m, self.channels))
            self.counters.sent += 1

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        self.settle(timeout)
        data, last = self.pop_beats()
        msgs = decode_beats(data, last, self.channels) if len(data) else []
        self.counters.received += len(msgs)
        return msgs

    # raw beats: what an AXI-stream master and slave see (the simulated DMA drives these) --------
    def push_beats(self, data: np.ndarray, last: np.ndarray) -> None:
        data = np.ascontiguousarray(data, dtype=np.uint64)
        last_u8 = np.ascontiguousarray(last, dtype=np.uint8)
        self._lib.amp_push(
            data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
            last_u8.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
            len(data),
        )

    def settle(self, timeout: float) -> None:
        """Run every kernel until none makes progress, or raise after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            rounds = self._lib.amp_run(ROUNDS_PER_CALL)
            if rounds == -2:
                raise DeviceError(f"C simulation kernel error: {self._lib.amp_error().decode()}")
            if rounds >= 0:
                return
            if time.monotonic() > deadline:
                raise DeviceTimeout(f"C simulation still busy after {timeout} s")

    def pop_beats(self, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Take beats waiting on host_out (at most ``limit``)."""
        n = self._lib.amp_pending_out()
        if limit is not None:
            n = min(n, limit)
        data = np.zeros(n, dtype=np.uint64)
        last = np.zeros(n, dtype=np.uint8)
        if n:
            n = self._lib.amp_pop(
                data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                last.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                n,
            )
        return data[:n], last[:n].astype(bool)

    @property
    def saturations(self) -> int:
        return int(self._lib.amp_saturations())

    @property
    def settings(self) -> DeviceSettings:
        return DeviceSettings.of(self.project.options, f"the C simulation in {self.project.root}")

    @property
    def pending_in(self) -> int:
        """host_in beats the simulation has not taken yet."""
        return int(self._lib.amp_pending_in())

    def reset(self) -> None:
        self._lib.amp_reset()
