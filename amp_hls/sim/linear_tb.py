"""cocotb bench of a Linear kernel (``k_<node>``): WEIGHTS loads, forwards, gradients, GRADS dumps.

Runs inside the simulator; ``tests/test_rtl_linear.py`` writes the stimulus (JSON, path in
``AMP_SIM_STIMULUS``) and checks what this bench records (``AMP_SIM_RESULT``) against the numpy
kernel. The stimulus is a list of phases; each loads its weights on ``params`` first, then sends its
forward messages, and sends each gradient back (in random order, after a random wait) once its
forward has come out, so several tags are in flight and the tag cache fills and drains. A phase
ends when every forward and gradient output is back, so which weights a message saw is fixed.
GRADS dumps are collected all along. The bench records the order the gradients went in (the order
the kernel accumulates them in) and, in timing mode (no stalls), the clock cycle of every message's
first and last beat on every stream. A phase may also send malformed messages (raw beats) after its
weights: the kernel must drop them, set amp_error, and serve the rest as if they had not come.
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

from amp_hls.message import Direction, Tag
from amp_hls.sim.axis import MessageSink, MessageSource
from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage

STREAMS = ("in0", "out0_grad", "params", "out0", "in0_grad", "grads")


def _message(kind: Kind, direction: Direction, doc: dict) -> WireMessage:
    tag = Tag(doc["key"], tuple(doc["state"]))
    return WireMessage(0, kind, direction, tag, np.array(doc["payload"], dtype=np.int64))


def _doc(msg: WireMessage) -> dict:
    return {"key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


async def _monitor(dut, prefix: str, events: list) -> None:  # type: ignore[no-untyped-def]
    """Record (cycle, stream, 'first' | 'last') for every message boundary on every stream."""
    sigs = {s: (getattr(dut, f"{prefix}{s}_TVALID"), getattr(dut, f"{prefix}{s}_TREADY"),
                getattr(dut, f"{prefix}{s}_TLAST")) for s in STREAMS}
    inside = dict.fromkeys(STREAMS, False)
    cycle = 0
    while True:
        await RisingEdge(dut.ap_clk)
        cycle += 1
        for s, (valid, ready, last) in sigs.items():
            if int(valid.value) and int(ready.value):
                if not inside[s]:
                    events.append((cycle, s, "first"))
                    inside[s] = True
                if int(last.value):
                    events.append((cycle, s, "last"))
                    inside[s] = False


async def _run_phase(dut, io: tuple, phase: dict, rng: random.Random, timing: bool) -> dict:  # type: ignore[no-untyped-def]
    """Forwards in, each gradient back once its forward is out; returns the outputs in arrival
    order and the order the gradients went in. Timing mode sends every gradient back to back once
    all forwards are out."""
    x_in, dy_in, y_out, dx_out = io
    forwards = [_message(Kind.DATA, Direction.FWD, d) for d in phase["fwd"]]
    grads = {m.tag: _message(Kind.DATA, Direction.BWD, d) for m, d in zip(forwards, phase["grads"])}
    released: list[Tag] = []
    order: list[Tag] = []

    async def feed() -> None:
        for m in forwards:
            await x_in.send(m)

    async def collect_forward() -> list[WireMessage]:
        out = []
        for _ in forwards:
            out.append(await y_out.recv())
            released.append(out[-1].tag)
        return out

    async def send_grads() -> None:
        while timing and len(released) < len(forwards):
            await RisingEdge(dut.ap_clk)
        for _ in forwards:
            while not released:
                await RisingEdge(dut.ap_clk)
            if not timing:
                await ClockCycles(dut.ap_clk, rng.randrange(1, 40))
            tag = released.pop(rng.randrange(len(released)))
            order.append(tag)
            await dy_in.send(grads[tag])

    cocotb.start_soon(feed())
    fwd_task = cocotb.start_soon(collect_forward())
    cocotb.start_soon(send_grads())
    backs = [await dx_out.recv() for _ in forwards]
    ys = await fwd_task
    return {"fwd": [_doc(m) for m in ys], "bwd": [_doc(m) for m in backs],
            "order": [{"key": t.key, "state": list(t.state)} for t in order]}


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def linear_bench(dut) -> None:  # type: ignore[no-untyped-def]
    stim = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())
    rng = random.Random(stim["seed"])
    rows, stall, p = stim["max_rows"], stim["stall"], stim["prefix"]
    x_map = ChannelMap([ChannelSpec(0, "x", {Kind.DATA: Shape(stim["in_width"], rows)})])
    y_map = ChannelMap([ChannelSpec(0, "y", {Kind.DATA: Shape(stim["out_width"], rows)})])
    shape = Shape(stim["params_width"], stim["out_width"])
    p_map = ChannelMap([ChannelSpec(0, "params", {Kind.WEIGHTS: shape, Kind.GRADS: shape})])

    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    x_in = MessageSource(dut, f"{p}in0", x_map, rng, stall)
    dy_in = MessageSource(dut, f"{p}out0_grad", y_map, rng, stall)
    w_in = MessageSource(dut, f"{p}params", p_map, rng, stall)
    y_out = MessageSink(dut, f"{p}out0", y_map, rng, stall)
    dx_out = MessageSink(dut, f"{p}in0_grad", x_map, rng, stall)
    g_out = MessageSink(dut, f"{p}grads", p_map, rng, stall)
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)

    events: list = []
    if stim["timing"]:
        cocotb.start_soon(_monitor(dut, p, events))
    dumps: list[WireMessage] = []

    async def collect_dumps() -> None:
        while True:
            dumps.append(await g_out.recv())

    cocotb.start_soon(collect_dumps())
    result: dict = {"phases": [], "dumps": [], "events": events}
    n_grads = 0
    for phase in stim["phases"]:
        await w_in.send(_message(Kind.WEIGHTS, Direction.FWD, phase["weights"]))
        await w_in.idle()  # loaded before any message of this phase is sent
        sources = {"in0": x_in, "out0_grad": dy_in, "params": w_in}
        for bad in phase.get("bad", []):  # malformed messages: dropped, amp_error set
            await sources[bad["stream"]].send_beats(bad["beats"])
            await sources[bad["stream"]].idle()
        result["phases"].append(await _run_phase(dut, (x_in, dy_in, y_out, dx_out), phase, rng, stim["timing"]))
        n_grads += len(phase["fwd"])
    want_dumps = n_grads // stim["muf"]
    for _ in range(20000):
        if len(dumps) >= want_dumps:
            break
        await RisingEdge(dut.ap_clk)
    await ClockCycles(dut.ap_clk, 50)  # anything extra would show up in the sinks
    result["dumps"] = [_doc(m) for m in dumps]
    result["extra"] = int(not y_out.empty()) + int(not dx_out.empty()) + int(not g_out.empty())
    result["error"] = int(getattr(dut, f"{p}amp_error").value)
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps(result))
    assert result["error"] == stim.get("expect_error", 0), "amp_error is not as expected"
    assert result["extra"] == 0, "the kernel sent more messages than it received"
    assert len(dumps) == want_dumps, f"{len(dumps)} GRADS dumps, expected {want_dumps}"
