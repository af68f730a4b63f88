"""The RTL kernels agree with the numpy device model, bit for bit and under back-pressure.

One graph (a Linear, then a relu, a tanh and a sigmoid node) gives the kernels, the boundary
(``k_demux``, ``k_mux``), ``amp_pkg`` and the harness that holds them side by side; they are built
once under Verilator (``amp_hls.sim.runner``, cached by source hash).

Activations: each case runs ``amp_hls.sim.activation_tb`` on one kernel: forward messages with several tags
(some sharing a key, differing in state words), gradients sent back in random order as their
forwards come out, random TVALID/TREADY stalls on every stream, and a tag cache smaller than the
number of messages so forwards wait for free slots. Every output must equal the numpy kernel's
(``ActivationKernel``, ``NumericConfig('fixed')``) message for message, with one forward and one
gradient out per message in (conservation). Values are half small, half over the whole 16-bit
wire range, so the tables are used inside and beyond their range and the backward saturates.

Boundary: ``amp_hls.sim.boundary_tb`` sends host_in messages for every demux route in DMA-like batches
(one TLAST per batch) and kernel-side messages (channel 0) into every mux source; each route must
get exactly its channel's messages in order, and host_out every message once, stamped with its
channel, in order per source.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.rtl import HARNESS, generate_rtl
from amp_hls.design import DeviceOptions, build_design
from amp_hls.ir import Graph
from amp_hls.kernels import ActivationKernel
from amp_hls.message import Direction, Message, Tag
from amp_hls.placement import place
from amp_hls.wire import Kind
from tests.helpers import FIXED, distinct_tags, wide_values

runner = pytest.importorskip("amp_hls.sim.runner")
pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

WIDTH, MAX_ROWS, SLOTS, N = 6, 3, 4, 12  # width 6: the second beat of a row is half padding


FNS = ("relu", "tanh", "sigmoid")  # also the node names


def _graph() -> Graph:
    g = Graph("rtl_activations")
    h = g.linear(g.source("x", width=WIDTH, max_rows=MAX_ROWS), WIDTH, name="fc")
    for fn in FNS:
        h = g.activation(h, fn, name=fn)
    g.loss(h, g.source("t", width=WIDTH, max_rows=MAX_ROWS), "mse")
    return g


def _payload(rng: np.random.Generator) -> list[list[int]]:
    return wide_values(rng, (int(rng.integers(1, MAX_ROWS + 1)), WIDTH))


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The graph and the one Verilator build of its activation kernels and boundary."""
    g = _graph()
    root = tmp_path_factory.mktemp("rtl")
    files = generate_rtl(build_design(g, DeviceOptions(cache_slots=SLOTS)), list(FNS), root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


@pytest.mark.parametrize("fn", FNS)
def test_activation_bit_exact(fn: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    g, build_dir = harness

    rng = np.random.default_rng(sum(map(ord, fn)))
    tags = distinct_tags(rng, N)
    fwd = [{"key": t.key, "state": list(t.state), "payload": _payload(rng)} for t in tags]
    grads = [dict(d, payload=wide_values(rng, np.shape(d["payload"]))) for d in fwd]
    stim = {"prefix": f"{fn}_", "seed": int(rng.integers(2**31)), "width": WIDTH, "max_rows": MAX_ROWS, "stall": 0.3,
            "fwd": fwd, "grads": grads}
    (tmp_path / "stim.json").write_text(json.dumps(stim))
    env = {"AMP_SIM_STIMULUS": str(tmp_path / "stim.json"), "AMP_SIM_RESULT": str(tmp_path / "result.json")}
    runner.run(build_dir, HARNESS, "amp_hls.sim.activation_tb", tmp_path / "run", env)
    result = json.loads((tmp_path / "result.json").read_text())

    kernel = ActivationKernel(g.nodes[fn], g, FIXED)
    want_fwd, want_bwd = {}, {}
    for d in fwd:
        tag = Tag(d["key"], tuple(d["state"]))
        ((_, y),) = kernel.forward(0, [Message(tag, Direction.FWD, np.array(d["payload"]))])
        want_fwd[tag] = y.payload.tolist()
    for gd in grads:  # the numpy kernel's result does not depend on the order
        tag = Tag(gd["key"], tuple(gd["state"]))
        ((_, dx),) = kernel.backward(0, [Message(tag, Direction.BWD, np.array(gd["payload"]))])
        want_bwd[tag] = dx.payload.tolist()
    assert kernel.pending() == 0

    for name, want in (("fwd", want_fwd), ("bwd", want_bwd)):
        got = {Tag(m["key"], tuple(m["state"])): m["payload"] for m in result[name]}
        assert len(result[name]) == N and got.keys() == want.keys(), f"{name}: messages lost or duplicated"
        for tag, payload in want.items():
            assert got[tag] == payload, f"{fn} {name} {tag}: RTL {got[tag]} != numpy {payload}"
    assert [m["key"] for m in result["fwd"]] == [d["key"] for d in fwd], "forward order changed"


def _wide(rng: np.random.Generator, kind: Kind, shape: tuple[int, int]) -> list[list[int]]:
    bits = 48 if kind is Kind.GRADS else 16  # GRADS hold 48-bit accumulators
    return rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), shape).tolist()


def _doc(rng: np.random.Generator, channel: int, kind: Kind, direction: Direction, width: int,
         max_rows: int) -> dict:
    state = rng.integers(0, 2**16, int(rng.integers(0, 5))).tolist()
    rows = int(rng.integers(1, max_rows + 1))
    return {"channel": channel, "kind": int(kind), "direction": int(direction),
            "key": int(rng.integers(0, 2**32)), "state": state,
            "payload": _wide(rng, kind, (rows, width))}


def test_boundary_routes_and_merges(harness: tuple[Graph, Path], tmp_path: Path) -> None:
    g, build_dir = harness
    placement = place(g)
    wires = build_design(g).wiring
    links = {link.name: link for link in wires.streams}
    rng = np.random.default_rng(6)

    inbound = []  # host_in: every demux route, shuffled
    for r in wires.demux_routes:
        kind, link = Kind[r["kind"].removeprefix("KIND_")], links[r["stream"]]
        direction = Direction[r["direction"].removeprefix("DIR_")]
        inbound += [_doc(rng, r["channel"], kind, direction, link.width, link.max_rows) for _ in range(6)]
    inbound = [inbound[i] for i in rng.permutation(len(inbound))]
    cuts = sorted(rng.choice(np.arange(1, len(inbound)), 5, replace=False).tolist())
    batches = [inbound[a:b] for a, b in zip([0, *cuts], [*cuts, len(inbound)])]

    outbound = {}  # per mux source: what its kernel writes
    for r in wires.mux_routes:
        link = links[r["stream"]]
        direction = Direction.FWD if link.name.startswith("fwd_") else Direction.BWD
        outbound[r["stream"]] = [
            _doc(rng, r["channel"], link.kind, direction, link.width, link.max_rows) for _ in range(6)
        ]

    channels = [{"channel": c.spec.channel, "name": c.spec.name,
                 "shapes": [[int(k), list(s)] for k, s in c.spec.shapes.items()]}
                for c in placement.channels]
    demux_out = {r["stream"]: sum(d["channel"] == r["channel"] for d in inbound) for r in wires.demux_routes}
    stim = {"seed": 11, "stall": 0.3, "channels": channels, "host_in": batches,
            "demux_out": demux_out, "mux_in": outbound}
    (tmp_path / "stim.json").write_text(json.dumps(stim))
    env = {"AMP_SIM_STIMULUS": str(tmp_path / "stim.json"), "AMP_SIM_RESULT": str(tmp_path / "result.json")}
    runner.run(build_dir, HARNESS, "amp_hls.sim.boundary_tb", tmp_path / "run", env)
    result = json.loads((tmp_path / "result.json").read_text())

    for r in wires.demux_routes:
        want = [d for d in inbound if d["channel"] == r["channel"]]
        assert result["demux"][r["stream"]] == want, f"demux route {r['stream']}"
    for r in wires.mux_routes:
        got = [d for d in result["mux"] if d["channel"] == r["channel"]]
        assert got == outbound[r["stream"]], f"mux source {r['stream']}"
    assert len(result["mux"]) == sum(map(len, outbound.values()))
