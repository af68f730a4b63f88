"""cocotb bench of row kernels (``k_<node>`` of group, ungroup or aggregate) inside ``amp_harness``.

``tests/test_rtl_rows.py`` writes the stimulus (JSON, path in ``AMP_SIM_STIMULUS``: one entry per
kernel, all run at once) and checks what this bench records (``AMP_SIM_RESULT``: per kernel the
messages out on each port, the count of extra ones, amp_error, the most tag-table entries busy at
once -- read from ``u_<node>.tags.used`` (its amp_tag_table) inside the harness --, and why it failed, if it timed out)
against the numpy kernels. The
bench knows nothing of the kind: it feeds each forward input port its messages in the order given,
answers every forward output with the gradient the stimulus holds for that output's tag, and
records every message that leaves on each output port.

Two modes:

- ``check``: random TVALID/TREADY stalls on every stream; a gradient goes back after a random wait
  (up to ``grad_wait`` cycles), in random order among those released, so several instances are in
  flight and the tag table fills and drains.
- ``cycles``: no stalls; all forward messages back to back, then (once every forward output is out)
  all gradients back to back. For each phase the bench reports the cycles from the first beat
  accepted on an input to the last beat sent on an output.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, SimTimeoutError, with_timeout

from amp_hls.cycles.resources import tag_table_chunk_bits
from amp_hls.message import Direction, Tag
from amp_hls.sim.axis import MessageSink, MessageSource
from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage

BACKWARD_OUT = ("in0_grad", "in1_grad")


def _message(direction: Direction, doc: dict) -> WireMessage:
    tag = Tag(doc["key"], tuple(doc["state"]))
    return WireMessage(0, Kind.DATA, direction, tag, np.array(doc["payload"], dtype=np.int64))


def _doc(msg: WireMessage) -> dict:
    return {"key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


def _channels(shape: list[int]) -> ChannelMap:
    return ChannelMap([ChannelSpec(0, "edge", {Kind.DATA: Shape(*shape)})])


class _Span:
    """Cycles from the first handshake on ``inputs`` to the last on ``outputs``."""

    def __init__(self, dut, prefix: str, inputs: list[str], outputs: list[str]):  # type: ignore[no-untyped-def]
        self.ins = [(getattr(dut, f"{prefix}{p}_TVALID"), getattr(dut, f"{prefix}{p}_TREADY")) for p in inputs]
        self.outs = [(getattr(dut, f"{prefix}{p}_TVALID"), getattr(dut, f"{prefix}{p}_TREADY")) for p in outputs]
        self.first: int | None = None
        self.last: int | None = None

    def sample(self, cycle: int) -> None:
        if self.first is None and any(int(v.value) and int(r.value) for v, r in self.ins):
            self.first = cycle
        if any(int(v.value) and int(r.value) for v, r in self.outs):
            self.last = cycle

    @property
    def cycles(self) -> int:
        assert self.first is not None and self.last is not None, "no traffic in this phase"
        return self.last - self.first + 1


async def _bench(dut, stim: dict) -> dict:  # type: ignore[no-untyped-def]
    """Runs one kernel's stimulus to the end (the clock runs and reset is done); its record."""
    rng = random.Random(stim["seed"])
    cycles_mode = stim["mode"] == "cycles"
    stall = 0.0 if cycles_mode else stim["stall"]
    p = stim["prefix"]
    shapes = stim["streams"]  # port -> [width, max_rows]
    inputs = {port: [_message(Direction.FWD, d) for d in docs] for port, docs in stim["inputs"].items()}
    grads = {Tag(d["key"], tuple(d["state"])): _message(Direction.BWD, d) for d in stim["grads"]}
    expect: dict[str, int] = stim["expect"]  # output port -> messages it must send

    sources = {port: MessageSource(dut, f"{p}{port}", _channels(shapes[port]), rng, stall) for port in inputs}
    dy_in = MessageSource(dut, f"{p}out0_grad", _channels(shapes["out0_grad"]), rng, stall)
    sinks = {port: MessageSink(dut, f"{p}{port}", _channels(shapes[port]), rng, stall) for port in expect}
    spans = {
        "fwd": _Span(dut, p, list(inputs), ["out0"]),
        "bwd": _Span(dut, p, ["out0_grad"], [q for q in BACKWARD_OUT if q in expect]),
    }

    used = getattr(dut, f"u_{p.removesuffix('_')}").tags.used  # the tag table's busy entries
    peak = 0  # most entries busy at once

    async def monitor() -> None:
        nonlocal peak
        cycle = 0
        while True:
            await RisingEdge(dut.ap_clk)
            cycle += 1
            for span in spans.values():
                span.sample(cycle)
            peak = max(peak, int(used.value).bit_count())

    async def feed(port: str) -> None:
        for m in inputs[port]:
            await sources[port].send(m)

    received: dict[str, list[WireMessage]] = {port: [] for port in expect}
    released: list[Tag] = []  # tags whose forward came out: their gradient may go back

    async def collect(port: str) -> None:
        for _ in range(expect[port]):
            received[port].append(await sinks[port].recv())
            if port == "out0":
                released.append(received[port][-1].tag)

    async def send_grads() -> None:
        if cycles_mode:  # all forwards first, then every gradient back to back
            while len(released) < expect["out0"]:
                await RisingEdge(dut.ap_clk)
            for tag in released:
                await send_grad(tag)
            return
        for _ in range(expect["out0"]):
            while not released:
                await RisingEdge(dut.ap_clk)
            await ClockCycles(dut.ap_clk, rng.randrange(1, stim["grad_wait"]))
            await send_grad(released.pop(rng.randrange(len(released))))

    unknown: list[str] = []  # forward outputs with a tag the stimulus has no gradient for

    async def send_grad(tag: Tag) -> None:
        if tag in grads:
            await dy_in.send(grads[tag])
        else:
            unknown.append(str(tag))

    tasks = [cocotb.start_soon(monitor()), cocotb.start_soon(send_grads())]
    tasks += [cocotb.start_soon(feed(port)) for port in inputs]
    collectors = [cocotb.start_soon(collect(port)) for port in expect]
    failure = ""
    try:  # a kernel that fails or hangs is reported as such; the others still finish
        for task in collectors:
            await with_timeout(task, stim["timeout_us"], "us")
        await ClockCycles(dut.ap_clk, 40)  # anything extra would show up in the sinks
    except SimTimeoutError:
        failure = f"timed out after {stim['timeout_us']} us"
    if unknown:
        failure += f" forward outputs with unexpected tags: {unknown}"
    for task in tasks + collectors:
        if not task.done():
            task.cancel()
    result = {
        "out": {port: [_doc(m) for m in msgs] for port, msgs in received.items()},
        "extra": sum(int(not s.empty()) for s in sinks.values()),
        "error": int(getattr(dut, f"{p}amp_error").value),
        "failure": failure,
        "peak_used": peak,
    }
    if cycles_mode and not failure:
        result["cycles"] = {phase: span.cycles for phase, span in spans.items()}
    return result


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def rows_bench(dut) -> None:  # type: ignore[no-untyped-def]
    """Every kernel's stimulus at once (the kernels share nothing but the clock and reset)."""
    benches = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())["benches"]
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 1 << tag_table_chunk_bits())  # the tag tables' scrub (full meanwhile)
    await RisingEdge(dut.ap_clk)
    tasks = {name: cocotb.start_soon(_bench(dut, stim)) for name, stim in benches.items()}
    results = {name: await task for name, task in tasks.items()}
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps(results))


async def _idle(source: MessageSource) -> bool:
    """Whether the source has sent all it was given (the kernel took it in)."""
    try:
        await with_timeout(source.idle(), 10, "ns")
    except SimTimeoutError:
        return False
    return True


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def rows_bad_input(dut) -> None:  # type: ignore[no-untyped-def]
    """After a reset, each kernel's malformed messages (``bad``: port -> messages): the kernel
    must take them in, raise amp_error and send nothing. Adds ``bad`` (error, sent, taken) to
    each kernel's record."""
    benches = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())["benches"]
    for stim in benches.values():  # the first test may have left a message half sent
        for port in ("in0", "in1", "out0_grad"):
            if port in stim["streams"]:
                getattr(dut, f"{stim['prefix']}{port}_TVALID").value = 0
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)
    rng = random.Random(0)
    sinks: dict[str, list[MessageSink]] = {}
    sources: dict[str, list[MessageSource]] = {name: [] for name in benches}
    for name, stim in benches.items():
        p, shapes = stim["prefix"], stim["streams"]
        sinks[name] = [MessageSink(dut, f"{p}{port}", _channels(shapes[port]), rng, 0.0)
                       for port in ("out0", *BACKWARD_OUT) if port in shapes]
        for port, docs in stim.get("bad", {}).items():
            source = MessageSource(dut, f"{p}{port}", _channels(shapes[port]), rng, 0.0)
            sources[name].append(source)
            direction = Direction.BWD if port.endswith("_grad") else Direction.FWD
            for d in docs:
                await source.send(_message(direction, d))
    await ClockCycles(dut.ap_clk, 200)  # time enough to take every message in
    path = Path(os.environ["AMP_SIM_RESULT"])
    results = json.loads(path.read_text())
    for name, stim in benches.items():
        results[name]["bad"] = {"error": int(getattr(dut, f"{stim['prefix']}amp_error").value),
                                "sent": sum(int(not s.empty()) for s in sinks[name]),
                                "taken": all([await _idle(s) for s in sources[name]])}
    path.write_text(json.dumps(results))
