"""cocotb bench of the boundary (``k_demux``, ``k_mux`` inside ``amp_harness``, prefixes
``demux_`` and ``mux_``).

``tests/test_rtl_boundary.py`` writes the stimulus (JSON, ``AMP_SIM_STIMULUS``) and checks what
this bench records (``AMP_SIM_RESULT``). host_in gets the messages in batches, one TLAST per batch
as from a DMA; every demux route and host_out are drained with random stalls. Each mux source
sends its messages with channel 0 in the header, as kernels write them, for the mux to stamp.
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
from amp_hls.wire import (
    ChannelMap,
    ChannelSpec,
    Kind,
    Shape,
    WireMessage,
    encode_beats,
    pack_header,
    unpack_header,
)


def message(doc: dict) -> WireMessage:
    return WireMessage(
        doc["channel"], Kind(doc["kind"]), Direction(doc["direction"]),
        Tag(doc["key"], tuple(doc["state"])), np.array(doc["payload"], dtype=np.int64),
    )


def document(msg: WireMessage) -> dict:
    return {"channel": msg.channel, "kind": int(msg.kind), "direction": int(msg.direction),
            "key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


def _unstamped(msg: WireMessage, channels: ChannelMap) -> list[int]:
    """The beats of ``msg`` with channel 0 in the header, as a kernel writes them."""
    beats = [int(b) for b in encode_beats(msg, channels)[0]]
    fields = unpack_header(beats[0])
    fields["channel"] = 0
    return [pack_header(**fields), *beats[1:]]


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def boundary_bench(dut) -> None:  # type: ignore[no-untyped-def]
    stim = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())
    rng = random.Random(stim["seed"])
    channels = ChannelMap(
        ChannelSpec(c["channel"], c["name"], {Kind(k): Shape(*s) for k, s in c["shapes"]})
        for c in stim["channels"]
    )
    stall = stim["stall"]
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    host_in = MessageSource(dut, "demux_host_in", channels, rng, stall)
    routes = {s: MessageSink(dut, f"demux_{s}", channels, rng, stall) for s in stim["demux_out"]}
    sources = {s: MessageSource(dut, f"mux_{s}", channels, rng, stall) for s in stim["mux_in"]}
    host_out = MessageSink(dut, "mux_host_out", channels, rng, stall)
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await RisingEdge(dut.ap_clk)

    async def feed_host_in() -> None:
        for batch in stim["host_in"]:
            await host_in.send_batch([message(d) for d in batch])

    async def feed_source(stream: str) -> None:
        for d in stim["mux_in"][stream]:
            await sources[stream].send_beats(_unstamped(message(d), channels))

    async def drain(sink: MessageSink, n: int) -> list[dict]:
        return [document(await sink.recv()) for _ in range(n)]

    cocotb.start_soon(feed_host_in())
    for stream in sources:
        cocotb.start_soon(feed_source(stream))
    routed = {s: cocotb.start_soon(drain(sink, stim["demux_out"][s])) for s, sink in routes.items()}
    merged = await drain(host_out, sum(len(v) for v in stim["mux_in"].values()))
    result = {"demux": {s: await t for s, t in routed.items()}, "mux": merged}
    await ClockCycles(dut.ap_clk, 20)  # anything extra would show up in the sinks
    result["extra"] = sum(not s.empty() for s in [*routes.values(), host_out])
    result["error"] = int(dut.demux_amp_error.value)
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps(result))
    assert result["error"] == 0, "the demux raised amp_error"
    assert result["extra"] == 0, "the boundary sent more messages than it received"
