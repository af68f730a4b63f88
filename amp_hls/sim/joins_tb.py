"""cocotb bench of a join kernel (add, mul, concat: inputs ``in0..``) or a rowsum (``in0`` only).

The kernel's streams are ``<prefix>in0`` etc. (``<node>_`` inside ``amp_harness``).
``tests/test_rtl_joins.py`` writes the stimulus (JSON, path in ``AMP_SIM_STIMULUS``) and checks
what this bench records (``AMP_SIM_RESULT``) against the numpy kernel. Three cocotb tests, each
after its own reset and with its own stream drivers:

- ``joins_mixed``: every input port sends its parts in its own order, each port starting ``lag``
  cycles after the one before (so the join table fills and parts of new tags must wait), with
  random TVALID/TREADY stalls on every stream; each forward output releases its tag's gradient,
  which goes back after a random wait and in random order, so several tags are in flight.
- ``joins_timing``: batches of equal-row messages sent back to back with no stalls anywhere, forward
  first, then (once every forward is out) the gradients; the bench records the cycle at which
  each message's header beat is accepted on ``in0`` and on ``out0_grad``, for the cycle model.
- ``joins_errors``: each of the stimulus's bad cases alone after a reset; records ``amp_error``.

Everything received is recorded, so the test checks values and conservation (each message once).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time

from amp_hls.cycles.resources import tag_table_chunk_bits
from amp_hls.message import Direction, Tag
from amp_hls.sim.axis import MessageSink, MessageSource
from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage

PERIOD_NS = 10


def _message(direction: Direction, doc: dict) -> WireMessage:
    tag = Tag(doc["key"], tuple(doc["state"]))
    return WireMessage(0, Kind.DATA, direction, tag, np.array(doc["payload"], dtype=np.int64))


def _doc(msg: WireMessage) -> dict:
    return {"key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


def _channels(width: int, max_rows: int) -> ChannelMap:
    return ChannelMap([ChannelSpec(0, "edge", {Kind.DATA: Shape(width, max_rows)})])


class Bench:
    """The kernel's streams as message sources and sinks, all with the same stall setting."""

    def __init__(self, dut, stim: dict, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        p = stim["prefix"]
        self.dut = dut
        self.ins = [
            MessageSource(dut, f"{p}in{i}", _channels(w, r), rng, stall) for i, (w, r) in enumerate(stim["in_shapes"])
        ]
        self.in_grads = [
            MessageSink(dut, f"{p}in{i}_grad", _channels(w, r), rng, stall) for i, (w, r) in enumerate(stim["in_shapes"])
        ]
        out = _channels(*stim["out_shape"])
        self.out = MessageSink(dut, f"{p}out0", out, rng, stall)
        self.out_grad = MessageSource(dut, f"{p}out0_grad", out, rng, stall)


async def _headers(dut, prefix: str, times: list[int], stop: list[bool]) -> None:  # type: ignore[no-untyped-def]
    """Appends the cycle of every header beat accepted on stream ``prefix`` until ``stop[0]``."""
    valid, ready, last = (getattr(dut, f"{prefix}_{s}") for s in ("TVALID", "TREADY", "TLAST"))
    first = True
    while not stop[0]:
        await RisingEdge(dut.ap_clk)
        if valid.value and ready.value:
            if first:
                times.append(int(get_sim_time("ns")) // PERIOD_NS)
            first = bool(last.value)


async def _mixed(dut, stim: dict, rng: random.Random) -> dict:  # type: ignore[no-untyped-def]
    phase = stim["mixed"]
    bench = Bench(dut, stim, rng, phase["stall"])
    n = len(phase["grads"])
    grads = {Tag(d["key"], tuple(d["state"])): _message(Direction.BWD, d) for d in phase["grads"]}

    async def feed(i: int) -> None:
        await ClockCycles(dut.ap_clk, 1 + i * phase["lag"])  # in0 runs ahead: the table fills
        for d in phase["inputs"][i]:
            await bench.ins[i].send(_message(Direction.FWD, d))

    released: list[Tag] = []  # tags whose forward came out: their gradient may go back

    async def collect_forward() -> list[WireMessage]:
        out = []
        for _ in range(n):
            out.append(await bench.out.recv())
            released.append(out[-1].tag)
        return out

    async def send_grads() -> None:
        for _ in range(n):
            while not released:
                await RisingEdge(dut.ap_clk)
            await ClockCycles(dut.ap_clk, rng.randrange(1, 40))
            await bench.out_grad.send(grads[released.pop(rng.randrange(len(released)))])

    async def collect_backward(i: int) -> list[WireMessage]:
        return [await bench.in_grads[i].recv() for _ in range(n)]

    for i in range(len(bench.ins)):
        cocotb.start_soon(feed(i))
    fwd_task = cocotb.start_soon(collect_forward())
    cocotb.start_soon(send_grads())
    bwd_tasks = [cocotb.start_soon(collect_backward(i)) for i in range(len(bench.ins))]
    backs = [await t for t in bwd_tasks]
    ys = await fwd_task
    await ClockCycles(dut.ap_clk, 40)  # anything extra would show up in the sinks
    extra = int(not bench.out.empty()) + sum(int(not s.empty()) for s in bench.in_grads)
    return {"fwd": [_doc(m) for m in ys], "bwd": [[_doc(m) for m in b] for b in backs], "extra": extra}


async def _timing(dut, stim: dict, rng: random.Random) -> list[dict]:  # type: ignore[no-untyped-def]
    bench = Bench(dut, stim, rng, 0.0)
    p = stim["prefix"]
    results = []
    for batch in stim["timing"]:
        n = len(batch["grads"])
        fwd_times: list[int] = []
        bwd_times: list[int] = []
        stop = [False]
        cocotb.start_soon(_headers(dut, f"{p}in0", fwd_times, stop))
        cocotb.start_soon(_headers(dut, f"{p}out0_grad", bwd_times, stop))

        async def feed(i: int, docs: list[dict]) -> None:
            for d in docs:
                await bench.ins[i].send(_message(Direction.FWD, d))

        for i, docs in enumerate(batch["inputs"]):
            cocotb.start_soon(feed(i, docs))
        ys = [await bench.out.recv() for _ in range(n)]
        for d in batch["grads"]:
            await bench.out_grad.send(_message(Direction.BWD, d))
        backs = [[await s.recv() for _ in range(n)] for s in bench.in_grads]
        stop[0] = True
        await ClockCycles(dut.ap_clk, 2)
        results.append({
            "rows": batch["rows"], "fwd_times": fwd_times, "bwd_times": bwd_times,
            "fwd": [_doc(m) for m in ys], "bwd": [[_doc(m) for m in b] for b in backs],
        })
    return results


async def _start(dut) -> dict:  # type: ignore[no-untyped-def]
    """Clock and reset (each cocotb test gets fresh stream drivers); the stimulus."""
    cocotb.start_soon(Clock(dut.ap_clk, PERIOD_NS, unit="ns").start())
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 1 << tag_table_chunk_bits())  # the tag tables' scrub (full meanwhile)
    await RisingEdge(dut.ap_clk)
    return json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())


def _record(key: str, value: object) -> None:
    path = Path(os.environ["AMP_SIM_RESULT"])
    result = json.loads(path.read_text()) if path.is_file() else {}
    result[key] = value
    path.write_text(json.dumps(result))


@cocotb.test(timeout_time=200, timeout_unit="us")  # a run takes under 10 us
async def joins_mixed(dut) -> None:  # type: ignore[no-untyped-def]
    stim = await _start(dut)
    result = await _mixed(dut, stim, random.Random(stim["seed"]))
    result["error"] = int(getattr(dut, f"{stim['prefix']}amp_error").value)
    _record("mixed", result)
    assert result["error"] == 0, "the kernel raised amp_error"
    assert result["extra"] == 0, "the kernel sent more messages than it received"


@cocotb.test(timeout_time=100, timeout_unit="us")
async def joins_timing(dut) -> None:  # type: ignore[no-untyped-def]
    stim = await _start(dut)
    result = await _timing(dut, stim, random.Random(stim["seed"]))
    _record("timing", result)
    assert int(getattr(dut, f"{stim['prefix']}amp_error").value) == 0, "the kernel raised amp_error"


@cocotb.test(timeout_time=100, timeout_unit="us")
async def joins_errors(dut) -> None:  # type: ignore[no-untyped-def]
    stim = await _start(dut)
    bench = Bench(dut, stim, random.Random(stim["seed"]), 0.0)
    raised = []
    for case in stim["errors"]:
        dut.ap_rst_n.value = 0
        await ClockCycles(dut.ap_clk, 4)
        dut.ap_rst_n.value = 1
        await RisingEdge(dut.ap_clk)
        for port, doc in case["msgs"]:
            if port == "out0_grad":
                await bench.out_grad.send(_message(Direction.BWD, doc))
            else:
                await bench.ins[int(port.removeprefix("in"))].send(_message(Direction.FWD, doc))
        await ClockCycles(dut.ap_clk, 100)
        raised.append(int(getattr(dut, f"{stim['prefix']}amp_error").value))
    _record("errors", raised)
