"""cocotb bench of an activation kernel (``k_<node>``): forward then backward, tags out of order.

The kernel's streams are ``<prefix>in0`` etc. (prefix ``""`` for a kernel as the top, ``<node>_``
inside ``amp_harness``), so the same bench drives a kernel alone or among others.

Runs inside the simulator; ``tests/test_rtl_activation.py`` writes the stimulus (JSON, path in
``AMP_SIM_STIMULUS``) and checks what this bench records (``AMP_SIM_RESULT``) against the numpy
kernel. Every forward output releases its tag's gradient, which goes back after a random wait
and in random order, so several tags are in flight and the tag cache fills and drains.
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


def _message(direction: Direction, doc: dict) -> WireMessage:
    tag = Tag(doc["key"], tuple(doc["state"]))
    return WireMessage(0, Kind.DATA, direction, tag, np.array(doc["payload"], dtype=np.int64))


def _doc(msg: WireMessage) -> dict:
    return {"key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def activation_bench(dut) -> None:  # type: ignore[no-untyped-def]
    stim = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())
    rng = random.Random(stim["seed"])
    channels = ChannelMap([ChannelSpec(0, "edge", {Kind.DATA: Shape(stim["width"], stim["max_rows"])})])
    forwards = [_message(Direction.FWD, d) for d in stim["fwd"]]
    grads = {m.tag: _message(Direction.BWD, d) for m, d in zip(forwards, stim["grads"])}

    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    p = stim["prefix"]
    x_in = MessageSource(dut, f"{p}in0", channels, rng, stim["stall"])
    dy_in = MessageSource(dut, f"{p}out0_grad", channels, rng, stim["stall"])
    y_out = MessageSink(dut, f"{p}out0", channels, rng, stim["stall"])
    dx_out = MessageSink(dut, f"{p}in0_grad", channels, rng, stim["stall"])
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)

    async def feed() -> None:
        for m in forwards:
            await x_in.send(m)

    released: list[Tag] = []  # tags whose forward came out: their gradient may go back

    async def collect_forward() -> list[WireMessage]:
        out = []
        for _ in forwards:
            out.append(await y_out.recv())
            released.append(out[-1].tag)
        return out

    async def send_grads() -> None:
        for _ in forwards:
            while not released:
                await RisingEdge(dut.ap_clk)
            await ClockCycles(dut.ap_clk, rng.randrange(1, 40))
            tag = released.pop(rng.randrange(len(released)))
            await dy_in.send(grads[tag])

    cocotb.start_soon(feed())
    fwd_task = cocotb.start_soon(collect_forward())
    cocotb.start_soon(send_grads())
    backs = [await dx_out.recv() for _ in forwards]
    ys = await fwd_task
    await ClockCycles(dut.ap_clk, 20)  # anything extra would show up in the sinks
    result = {
        "fwd": [_doc(m) for m in ys],
        "bwd": [_doc(m) for m in backs],
        "extra": int(not y_out.empty()) + int(not dx_out.empty()),
        "error": int(getattr(dut, f"{p}amp_error").value),
    }
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps(result))
    assert result["error"] == 0, "the kernel raised amp_error"
    assert result["extra"] == 0, "the kernel sent more messages than it received"
