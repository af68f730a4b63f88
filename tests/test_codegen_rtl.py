"""The generated SystemVerilog package carries the Python definitions unchanged (no simulator).

``tests/test_rtl_activation.py`` runs the RTL; these checks read the generated text, so they run
everywhere and name the constant or table entry that drifted.
"""

from __future__ import annotations

import re

import pytest

from amp_hls.codegen.rtl import render_boundary, render_kernel, render_package, rtl_kinds, sv64
from amp_hls.design import build_design
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph
from amp_hls.numerics import ACC_BITS, LUT_KINDS, NumericConfig, Precision, activation_table
from amp_hls.wire import wire_constants

CONFIG = NumericConfig("fixed", data=Precision(16, 10), weights=Precision(16, 12), grads=Precision(16, 11))


def _localparams(text: str) -> dict[str, int]:
    out = {}
    for name, value in re.findall(r"localparam (?:integer|signed \[63:0\]) (\w+) = ([^;]+);", text):
        m = re.fullmatch(r"(-?)(?:64'sd)?(\d+)", value.strip())
        if m:
            out[name] = int(m.group(2)) * (-1 if m.group(1) else 1)
    return out


def test_package_holds_every_wire_constant_and_precision() -> None:
    params = _localparams(render_package(CONFIG))
    for name, value in wire_constants().items():
        assert params[name] == value, name
    assert params["ACC_BITS"] == ACC_BITS
    for cls, p in (("DATA", CONFIG.data), ("WEIGHTS", CONFIG.weights), ("GRADS", CONFIG.grads)):
        assert (params[f"{cls}_WIDTH"], params[f"{cls}_FRAC"]) == (p.width, p.frac)
        assert (params[f"{cls}_MIN"], params[f"{cls}_MAX"]) == (p.qmin, p.qmax)
    assert params["GRAD_ACC_FRAC"] == CONFIG.grad_acc_frac


@pytest.mark.parametrize("kind", LUT_KINDS)
def test_package_tables_equal_the_numpy_tables(kind: str) -> None:
    text = render_package(CONFIG)
    table = activation_table(kind, CONFIG.data)
    rom = re.search(rf"{kind.upper()}_LUT = \{{(.*?)\}};", text, re.S)
    assert rom is not None
    words = [int(h, 16) for h in re.findall(r"32'h([0-9a-f]{8})", rom.group(1))]
    entries = [w - (1 << 32) if w >= 1 << 31 else w for w in reversed(words)]  # entry 0 is last
    assert entries == list(table.values)
    assert f"(c - {sv64(table.lo)}) >>> {table.shift};" in text


def test_sv64_literals() -> None:
    assert sv64(5) == "64'sd5"
    assert sv64(-32768) == "-64'sd32768"


def test_every_device_kind_has_an_rtl_kernel_and_host_kinds_none() -> None:
    from amp_hls.ir.nodes import NODE_KINDS

    kinds = set(rtl_kinds())
    host_only = {"source", "sink"}
    assert kinds == set(NODE_KINDS) - host_only
    g = Graph("no_rtl")
    x = g.source("x", width=4)
    g.loss(g.linear(x, 4, name="fc"), g.source("t", width=4), "mse")
    with pytest.raises(AmpHlsError, match="no RTL kernel for node kind 'source'"):
        render_kernel(build_design(g), "x")


def test_boundary_has_a_port_per_route() -> None:
    g = Graph("routes")
    x = g.source("x", width=4, max_rows=2)
    g.loss(g.tanh(g.linear(x, 4, name="fc"), name="act"), g.source("t", width=4, max_rows=2), "mse")
    design = build_design(g)
    wires = design.wiring
    text = render_boundary(design)
    for r in wires.demux_routes:
        assert f"output wire [63:0] {r['stream']}_TDATA,  // channel {r['channel']} " in text
    for r in wires.mux_routes:
        assert f"input  wire [63:0] {r['stream']}_TDATA,  // channel {r['channel']} " in text
