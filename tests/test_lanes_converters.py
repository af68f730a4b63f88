"""amp_widen and amp_narrow (hw/rtl/amp_lanes.sv) against their reference, ``wire.to_lanes`` and
``wire.from_lanes``: random messages, back to back and under random TVALID/TREADY stalls on both
sides, through a widen and a narrow of 2 and of 8 lanes. Each wide frame a widen sends must be
``to_lanes`` of the message it took, each narrow frame a narrow sends the message whose
``to_lanes`` it took. Rows of 13 elements (4 beats): at 2 lanes a row's second wide beat is half
padding, at 8 lanes a row is one wide beat, mostly padding.

The bench runs inside Verilator (cocotb); the pytest test builds it once and runs it.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

import numpy as np
import pytest

from amp_hls.message import Tag
from amp_hls.wire import (
    Kind,
    beats_per_row,
    to_lanes,
)
from tests.helpers import data_message_beats

runner = pytest.importorskip("amp_hls.sim.runner")
cocotb = pytest.importorskip("cocotb")
from cocotb.clock import Clock  # noqa: E402
from cocotb.triggers import ClockCycles  # noqa: E402
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource  # noqa: E402

pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

TOP = "lanes_tb"
WIDTH, MAX_ROWS, MESSAGES = 13, 4, 40
LANES = (2, 8)
RTL = Path(__file__).resolve().parents[1] / "hw" / "rtl" / "amp_lanes.sv"


def _wrapper() -> str:
    """amp_widen and amp_narrow of each of ``LANES`` side by side, ports w<L>_s/m and n<L>_s/m."""
    bpr = beats_per_row(Kind.DATA, WIDTH)
    ports, bodies = ["input wire ap_clk", "input wire ap_rst_n"], []
    for lanes in LANES:
        for part, s_bits, m_bits in (("w", 64, 64 * lanes), ("n", 64 * lanes, 64)):
            p = f"{part}{lanes}"
            ports += [f"input wire [{s_bits - 1}:0] {p}_s_TDATA", f"input wire {p}_s_TVALID",
                      f"output wire {p}_s_TREADY", f"input wire {p}_s_TLAST",
                      f"output wire [{m_bits - 1}:0] {p}_m_TDATA", f"output wire {p}_m_TVALID",
                      f"input wire {p}_m_TREADY", f"output wire {p}_m_TLAST"]
            module = "amp_widen" if part == "w" else "amp_narrow"
            wires = ", ".join(f".{s}_{x}({p}_{s}_{x})" for s in ("s", "m") for x in ("TDATA", "TVALID", "TREADY", "TLAST"))
            bodies.append(f"  {module} #(.L({lanes}), .BPR({bpr})) u_{p} (.ap_clk(ap_clk), .ap_rst_n(ap_rst_n), {wires});")
    return f"module {TOP} (\n    " + ",\n    ".join(ports) + "\n);\n" + "\n".join(bodies) + "\nendmodule\n"


def test_the_converters_are_their_reference_under_stalls(tmp_path: Path) -> None:
    (tmp_path / f"{TOP}.sv").write_text(_wrapper())
    build = runner.build([RTL, tmp_path / f"{TOP}.sv"], TOP, tmp_path / "cache")
    runner.run(build, TOP, "tests.test_lanes_converters", tmp_path / "run", {"AMP_LANES_SEED": "3"})


# --------------------------------------------------------------------------- the bench (in the simulator)


def _messages(rng: random.Random) -> list[list[int]]:
    """``MESSAGES`` DATA messages of 1..MAX_ROWS rows of random int16, as their 64-bit beats."""
    nprng = np.random.default_rng(rng.getrandbits(32))
    return [data_message_beats(rng.randint(1, MAX_ROWS), WIDTH, nprng,
                               Tag(i, tuple(rng.randrange(1 << 16) for _ in range(rng.randint(0, 2)))))
            for i in range(MESSAGES)]


def _end(kind, dut, prefix: str, rng: random.Random, stall: dict[str, float]):  # type: ignore[no-untyped-def]
    """A cocotbext-axi source or sink on ``<prefix>_T*``, a whole TDATA word a lane (any width),
    pausing with probability ``stall["p"]`` (changed between rounds)."""
    end = kind(AxiStreamBus.from_prefix(dut, prefix), dut.ap_clk, dut.ap_rst_n, reset_active_level=False, byte_lanes=1)
    end.log.setLevel("WARNING")
    end.set_pause_generator(rng.random() < stall["p"] for _ in itertools.count())
    return end


async def _through(source, sink, frames: list[list[int]], want: list[list[int]], where: str) -> None:  # type: ignore[no-untyped-def]
    for frame in frames:
        await source.send(AxiStreamFrame(frame))
    for i, expected in enumerate(want):
        got = [int(b) for b in (await sink.recv()).tdata]
        assert got == expected, f"{where}, message {i}: {got} != {expected}"
    assert sink.empty(), f"{where}: more came out than went in"


if os.environ.get("AMP_LANES_SEED"):  # only inside the simulator

    @cocotb.test(timeout_time=20, timeout_unit="ms")
    async def converters_against_reference(dut) -> None:  # type: ignore[no-untyped-def]
        rng = random.Random(int(os.environ["AMP_LANES_SEED"]))
        cocotb.start_soon(Clock(dut.ap_clk, 10, "ns").start())
        dut.ap_rst_n.value = 0
        await ClockCycles(dut.ap_clk, 4)
        dut.ap_rst_n.value = 1
        stall = {"p": 0.0}
        ends = {f"{part}{lanes}": (_end(AxiStreamSource, dut, f"{part}{lanes}_s", rng, stall),
                                   _end(AxiStreamSink, dut, f"{part}{lanes}_m", rng, stall))
                for lanes in LANES for part in "wn"}
        for stall["p"], what in ((0.0, "back to back"), (0.4, "stalling")):
            messages = _messages(rng)
            for lanes in LANES:
                wide = [to_lanes(m, WIDTH, lanes) for m in messages]
                await _through(*ends[f"w{lanes}"], messages, wide, f"amp_widen L={lanes}, {what}")
                await _through(*ends[f"n{lanes}"], wide, messages, f"amp_narrow L={lanes}, {what}")
