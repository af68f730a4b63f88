"""cocotb bench of ``amp_top``, the RTL of a generated project's device part (written by
``amp-hls testbench``; needs only an installed amp-hls, cocotb and cocotbext-axi: the stream
drivers are the package's own, ``amp_hls.sim.axis``).

The host side runs here, in the simulator's Python: the graph's host nodes (sources, losses)
on the numpy engine, as ``amp_hls.host.runner.HostRunner`` runs them, with at most ``mak``
instances in flight. What they send to the device goes into host_in as DMA transfers (several
messages in one frame, TLAST only at its end, random TVALID gaps); host_out is read one
message per frame with random TREADY gaps, and every message is handed back to the host nodes.
The stimulus (JSON, path in ``AMP_TB_STIMULUS``) gives the project, the instances, mak, the
weights and how many GRADS dumps to expect; what came out of host_out is written to
``AMP_TB_RESULT`` for ``amp_hls.sim.project_bench`` to compare with the numpy device model.
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, First, RisingEdge
from cocotb.utils import get_sim_time

from amp_hls.host.runner import HostRunner
from amp_hls.message import Direction, Message, Tag
from amp_hls.sim.axis import MessageSink, MessageSource
from amp_hls.sim.project_bench import CaptureDevice, decode_instances, message_doc, project_setup
from amp_hls.wire import Kind, WireMessage, encode_beats, pack_header

TIMEOUT_US = float(os.environ.get("AMP_TB_TIMEOUT_US", "200000"))
SETTLE = 200  # cycles to wait at the end: a message sent in excess would show up by then
RESET_BOUND = 20_000  # cycles the device may take to accept a message after reset (the longest clear is a few thousand words)


@cocotb.test(timeout_time=TIMEOUT_US, timeout_unit="us")
async def amp_top_bench(dut) -> None:  # type: ignore[no-untyped-def]
    stim = json.loads(Path(os.environ["AMP_TB_STIMULUS"]).read_text())
    placement, options, weights = project_setup(Path(stim["project"]), stim["weights_seed"])
    channels = placement.channel_map
    rng = random.Random(stim["seed"])

    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    host_in = MessageSource(dut, "host_in", channels, rng, stim["stall"])
    host_out = MessageSink(dut, "host_out", channels, rng, stim["stall"])
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)
    start = get_sim_time("ns")

    collector = CaptureDevice(placement)  # the weights HostRunner sends go out on host_in
    runner = HostRunner(placement, collector, options.numerics, seed=stim["seed"])
    host = runner.host

    async def send(msgs: list[WireMessage]) -> None:
        """As a DMA would: random runs of messages, one frame (one TLAST) each."""
        while msgs:
            n = rng.randint(1, stim["batch"])
            await host_in.send_batch(msgs[:n])
            msgs = msgs[n:]

    inbox: list[WireMessage] = []
    arrived = Event()
    received: list[dict] = []

    async def receive() -> None:
        while True:
            msg = await host_out.recv()  # one message per frame
            received.append(message_doc(msg))
            inbox.append(msg)
            arrived.set()

    cocotb.start_soon(receive())
    if weights:
        runner.send_weights(weights, version=stim["weights_version"])
        await send(collector.sent)

    pending = deque(decode_instances(stim["instances"]))
    key = 0
    while True:
        host.run()  # first, so instances that just finished make room
        while pending and len(runner.active_keys()) < stim["mak"]:
            host.inject(key, pending.popleft())
            key += 1
        host.run()
        outgoing = []
        for edge, msg in host.take_outbox():
            ch = placement.edge_channel(edge)
            outgoing.append(WireMessage(ch.channel, Kind.DATA, msg.direction, msg.tag,
                                        np.asarray(msg.payload, dtype=np.int64)))
        await send(outgoing)
        if inbox:
            for m in inbox:
                ch = placement.channel(m.channel)
                if m.kind is Kind.DATA and ch.edge is not None:
                    host.receive(ch.edge, Message(m.tag, m.direction, m.payload))
                elif m.kind is not Kind.GRADS:
                    raise AssertionError(f"{ch.spec}: unexpected {m.kind.name} message from amp_top")
            inbox.clear()
            continue
        grads = sum(d["kind"] == int(Kind.GRADS) for d in received)
        if not pending and not runner.active_keys() and grads >= stim["expected_grads"]:
            break
        arrived.clear()
        await First(arrived.wait(), ClockCycles(dut.ap_clk, stim["idle_cycles"]))
        if not arrived.is_set():
            raise AssertionError(
                f"amp_top sent nothing for {stim['idle_cycles']} cycles: {len(runner.active_keys())} "
                f"instances in flight, {len(pending)} to go, {len(received)} messages received, "
                f"amp_error={int(dut.amp_error.value)}, host still holds {host.conservation_report()}")

    cycles = int((get_sim_time("ns") - start) // 10)
    await ClockCycles(dut.ap_clk, SETTLE)
    result = {
        "received": received,
        "host_conservation": host.conservation_report(),
        "error": int(dut.amp_error.value),
        "cycles": cycles,
    }
    Path(os.environ["AMP_TB_RESULT"]).write_text(json.dumps(result))
    assert result["error"] == 0, "amp_top raised amp_error"


@cocotb.test(timeout_time=1, timeout_unit="ms")
async def amp_top_flags_bad_input(dut) -> None:  # type: ignore[no-untyped-def]
    """amp_error rises for a partial beat (TKEEP) and for a message on no channel, and reset
    clears it: the sticky error every kernel and the boundary report, ORed at the top."""
    stim = json.loads(Path(os.environ["AMP_TB_STIMULUS"]).read_text())
    placement, _, _ = project_setup(Path(stim["project"]), None)
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    host_in = MessageSource(dut, "host_in", placement.channel_map, random.Random(0), 0.0)
    dut.host_out_TREADY.value = 1
    # a well-formed forward into the device, which no kernel objects to, and a header for no channel
    ch = next(c for c in placement.channels if c.edge is not None and placement.enters_device(c.edge))
    width = ch.spec.shape(Kind.DATA).width
    good, _ = encode_beats(WireMessage(ch.channel, Kind.DATA, Direction.FWD, Tag(1, ()), np.zeros((1, width), np.int64)),
                           placement.channel_map)
    header = pack_header(channel=max(c.channel for c in placement.channels) + 1, kind=int(Kind.DATA), rows=1)

    async def after_reset(beats: list[int], tkeep: list[int] | None = None) -> tuple[int, int]:
        dut.ap_rst_n.value = 0
        await ClockCycles(dut.ap_clk, 4)
        dut.ap_rst_n.value = 1
        await ClockCycles(dut.ap_clk, 2)
        before = int(dut.amp_error.value)
        await host_in.send_beats(beats, tkeep)
        # the last beat is taken once the kernels are out of their reset (tag-table scrubs and
        # accumulator clears, longer in a larger design): wait for it, within a bound
        await First(cocotb.start_soon(host_in.idle()), ClockCycles(dut.ap_clk, RESET_BOUND))
        await ClockCycles(dut.ap_clk, 50)
        return before, int(dut.amp_error.value)

    keep = await after_reset(list(good), tkeep=[1] * (8 * len(good) - 3) + [0] * 3)
    channel = await after_reset([header])
    Path(os.environ["AMP_TB_RESULT"]).write_text(json.dumps({"keep": keep, "channel": channel}))
    assert keep == (0, 1), "a partial beat on host_in did not raise amp_error"
    assert channel == (0, 1), "a message for no channel did not raise amp_error"
