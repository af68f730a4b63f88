"""cocotb bench of the routing kernels (split, broadcast, cond, phi, isu) inside ``amp_harness``.

Runs inside the simulator; ``tests/test_rtl_routing.py`` writes the stimulus (JSON, path in
``AMP_SIM_STIMULUS``) and checks what this bench records (``AMP_SIM_RESULT``) against the numpy
kernels. The stimulus lists kernels (streams ``<node>_<port>``) that run side by side, each with a
timeout of its own so one hung kernel is reported by name. Two modes:

- ``"exact"``: forward messages go in on their ports; every forward output on ``out<j>`` releases
  its tag's gradient for ``out<j>_grad``, which goes back after a random wait, either in a fixed
  order per port (each waits for its own release) or picked at random among the released ones;
  port ``out<j>_grad`` starts ``j * lag`` cycles late, so a join sees one port run ahead.
  Random TVALID/TREADY stalls on every stream. Every output message is recorded per port; then
  any ``bad`` messages are sent, each of which must raise ``amp_error`` and come out nowhere.
- ``"cycles"``: no stalls; each phase queues messages back to back and records the cycle of the
  first input beat and of the last output beat, from which the test derives cycles per message.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout

from amp_hls.message import Direction, Tag
from amp_hls.sim.axis import MessageSink, MessageSource
from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage

TIMEOUT_US = 400  # per kernel


def _message(port: str, doc: dict) -> WireMessage:
    direction = Direction.BWD if port.endswith("_grad") else Direction.FWD
    return WireMessage(0, Kind.DATA, direction, Tag(doc["key"], tuple(doc["state"])),
                       np.array(doc["payload"], dtype=np.int64))


def _doc(msg: WireMessage) -> dict:
    return {"key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


def _tag(doc: dict) -> Tag:
    return Tag(doc["key"], tuple(doc["state"]))


def _reads(port: str) -> bool:
    """Whether the kernel reads ``port`` (forward inputs and incoming gradients)."""
    return port.startswith("in") != port.endswith("_grad")


class Streams:
    """The message sources and sinks of one kernel's ports."""

    def __init__(self, dut, k: dict, rng: random.Random, stall: float):  # type: ignore[no-untyped-def]
        self.sources: dict[str, MessageSource] = {}
        self.sinks: dict[str, MessageSink] = {}
        for port, (width, max_rows) in k["shapes"].items():
            channels = ChannelMap([ChannelSpec(0, "edge", {Kind.DATA: Shape(width, max_rows)})])
            if _reads(port):
                self.sources[port] = MessageSource(dut, k["prefix"] + port, channels, rng, stall)
            else:
                self.sinks[port] = MessageSink(dut, k["prefix"] + port, channels, rng, stall)


async def _exact(dut, k: dict, rng: random.Random, stall: float, result: dict) -> None:  # type: ignore[no-untyped-def]
    """Fills ``result`` as it goes, so a kernel that hangs still shows what it sent."""
    io = Streams(dut, k, rng, stall)
    released: dict[str, list[Tag]] = {port: [] for port in k["grads"]}
    grads = {port: {_tag(d): _message(port, d) for d in docs} for port, docs in k["grads"].items()}
    got: dict[str, list[dict]] = {port: [] for port in io.sinks}
    result.update(out=got, unexpected=0)

    async def feed(port: str) -> None:
        for d in k["fwd"][port]:
            await io.sources[port].send(_message(port, d))

    async def collect(port: str) -> None:
        for _ in range(k["expect"][port]):
            msg = await io.sinks[port].recv()
            got[port].append(_doc(msg))
            if msg.tag in grads.get(f"{port}_grad", {}):
                released[f"{port}_grad"].append(msg.tag)
            elif f"{port}_grad" in grads:
                result["unexpected"] += 1  # a tag the test never meant for this port

    async def send_back(port: str) -> None:
        await ClockCycles(dut.ap_clk, 1 + k["lag"] * int(port[3:-5]))  # later ports start later
        for d in k["grads"][port]:
            if k["order"] == "fixed":
                while _tag(d) not in released[port]:
                    await RisingEdge(dut.ap_clk)
                tag = _tag(d)
                released[port].remove(tag)
            else:
                while not released[port]:
                    await RisingEdge(dut.ap_clk)
                tag = released[port].pop(rng.randrange(len(released[port])))
            await ClockCycles(dut.ap_clk, rng.randrange(1, 30))
            await io.sources[port].send(grads[port][tag])

    for port in k["fwd"]:
        cocotb.start_soon(feed(port))
    for port in k["grads"]:
        cocotb.start_soon(send_back(port))
    for task in [cocotb.start_soon(collect(port)) for port in io.sinks]:
        await task
    await ClockCycles(dut.ap_clk, 40)  # anything extra would show up in the sinks
    error = getattr(dut, f"{k['prefix']}amp_error")
    result.update(extra=sum(not s.empty() for s in io.sinks.values()), error=int(error.value))
    for bad in k.get("bad", []):
        await io.sources[bad["port"]].send(_message(bad["port"], bad["doc"]))
        await io.sources[bad["port"]].idle()
        await ClockCycles(dut.ap_clk, 40)
    if k.get("bad"):
        result["bad_error"] = int(error.value)
        result["bad_extra"] = sum(not s.empty() for s in io.sinks.values())


def _handshake(dut, stream: str, last: bool = False) -> bool:  # type: ignore[no-untyped-def]
    """Whether a beat (the last of a message, with ``last``) moves on ``stream`` this cycle."""
    moved = int(getattr(dut, f"{stream}_TVALID").value) and int(getattr(dut, f"{stream}_TREADY").value)
    return bool(moved and (not last or int(getattr(dut, f"{stream}_TLAST").value)))


async def _monitor(dut, ins: list[str], outs: list[str], first: list[int], last: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Records the cycle of the first input beat on ``ins`` and of every message end on ``outs``."""
    cycle = 0
    while True:
        await RisingEdge(dut.ap_clk)
        cycle += 1
        if not first and any(_handshake(dut, s) for s in ins):
            first.append(cycle)
        last += [cycle for s in outs if _handshake(dut, s, last=True)]


async def _cycles(dut, k: dict, rng: random.Random) -> list[dict]:  # type: ignore[no-untyped-def]
    io = Streams(dut, k, rng, 0.0)
    p = k["prefix"]
    measured = []
    for phase in k["phases"]:
        first: list[int] = []
        last: list[int] = []
        mon = cocotb.start_soon(_monitor(dut, [p + s for s in phase["send"]], [p + s for s in io.sinks], first, last))
        for port, docs in phase["send"].items():
            for d in docs:
                await io.sources[port].send(_message(port, d))  # queued: they go back to back
        while len(last) < phase["outputs"]:
            await RisingEdge(dut.ap_clk)
        await ClockCycles(dut.ap_clk, 10)
        mon.cancel()
        measured.append({"first": first[0], "last": last[-1], "outputs": len(last),
                         "messages": sum(map(len, phase["send"].values()))})
        for sink in io.sinks.values():  # drain what was recorded by the handshakes
            while not sink.empty():
                await sink.recv()
    return measured


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def routing_bench(dut) -> None:  # type: ignore[no-untyped-def]
    stim = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)

    results: dict[str, dict] = {}

    async def one(k: dict, seed: int) -> None:
        rng = random.Random(seed)
        result: dict = {}
        results[k["name"]] = {"result": result}
        try:
            if stim["mode"] == "exact":
                await with_timeout(_exact(dut, k, rng, stim["stall"], result), TIMEOUT_US, "us")
            else:
                result["phases"] = await with_timeout(_cycles(dut, k, rng), TIMEOUT_US, "us")
        except TimeoutError:
            results[k["name"]]["timeout"] = True

    tasks = [cocotb.start_soon(one(k, stim["seed"] + i)) for i, k in enumerate(stim["kernels"])]
    for task in tasks:
        await task
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps(results))
