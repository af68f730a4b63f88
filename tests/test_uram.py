"""UltraRAM on boards that have it: the one placement rule (amp_hls/memories.py) as the RTL applies
it (Yosys maps exactly the memories the rule names to URAM288), as the resource model prices it,
and a design with memories in URAM simulated bit-exact under Verilator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen import rtl
from amp_hls.codegen.boards import load_board
from amp_hls.codegen.project import generate_project, open_design
from amp_hls.cycles.resources import design_resources, kernel_rtl
from amp_hls.design import DeviceOptions, build_design
from amp_hls.ir import Graph
from amp_hls.memories import URAM_BLOCK_BITS, in_uram, uram_blocks
from tests.helpers import needs_yosys, synth_amp_ram

WIDE = 256  # elements a row: 64 beats, so 32 cached rows of an activation fill 2,048 words of 64 bits
SLOTS = 32


def _wide_activation() -> Graph:
    """A tanh over wide rows: its saved beats (SLOTS x 64 words of 64 bits) fill a URAM288 44%."""
    g = Graph("uram_tanh")
    g.loss(g.tanh(g.source("x", width=WIDE), name="act"), g.source("t", width=WIDE), "mse", name="l")
    return g


def test_the_rule_takes_well_filled_memories_only() -> None:
    assert uram_blocks(64, 2048) == 1 and uram_blocks(73, 4097) == 4 and uram_blocks(16, 8192) == 2
    assert in_uram(64, 2048, True) and in_uram(48, 4096, True) and in_uram(304, 2048, True)  # 44%, 67%, 42% full
    assert not in_uram(16, 8192, True)  # a weight bank: 22% of two blocks
    assert not in_uram(32, 2048, True) and not in_uram(64, 1024, True)
    assert not in_uram(64, 4096, False)  # a board without URAM
    fill = 64 * 2048 / URAM_BLOCK_BITS
    assert 0.4 <= fill < 0.5


def test_only_a_board_with_uram_uses_it(tmp_path: Path) -> None:
    """pynq-z2 has none; zcu104's design records it in the manifest, and its package says so."""
    options = DeviceOptions(cache_slots=SLOTS)
    assert not options.on_board(load_board("pynq-z2")).use_uram
    assert options.on_board(load_board("zcu104")).use_uram
    root = generate_project(_wide_activation(), tmp_path / "p", "zcu104", options).root
    assert json.loads((root / "manifest.json").read_text())["use_uram"] is True
    assert open_design(root).options.use_uram
    assert "localparam integer USE_URAM = 1;" in (root / "rtl" / rtl.PACKAGE_FILE).read_text()
    pynq = generate_project(_wide_activation(), tmp_path / "q", "pynq-z2", options).root
    assert "localparam integer USE_URAM = 0;" in (pynq / "rtl" / rtl.PACKAGE_FILE).read_text()


def test_the_model_moves_those_memories_from_block_ram_to_uram() -> None:
    graph = _wide_activation()
    plain = build_design(graph, DeviceOptions(cache_slots=SLOTS))
    ultra = build_design(graph, DeviceOptions(cache_slots=SLOTS, use_uram=True))
    saved = next(m for m in kernel_rtl(ultra, "act").memories if m.name == "saved")
    assert (saved.width, saved.depth) == (64, 2048) and saved.in_uram(True)
    a, b = design_resources(plain).kernels["act"], design_resources(ultra).kernels["act"]
    assert a.uram == 0 and b.uram == 1
    assert a.bram36 - b.bram36 == pytest.approx(saved.bram36)  # the 4 RAMB36 it needed in block RAM


@pytest.mark.yosys
@needs_yosys
@pytest.mark.parametrize(("width", "address_bits"), [(64, 11), (16, 13), (59, 11), (57, 11)])  # 59, 57: 41%, 39.6% full
def test_yosys_maps_to_uram_exactly_what_the_rule_names(width: int, address_bits: int, tmp_path: Path) -> None:
    """amp_ram under ``synth_xilinx -family xcup``: URAM288 blocks as the rule counts them when it
    names the memory, block RAM otherwise."""
    est = synth_amp_ram(tmp_path, width, address_bits, rtl.render_package(DeviceOptions().numerics, use_uram=True), "xcup")
    depth = 1 << address_bits
    if in_uram(width, depth, True):
        assert est.resources["uram"] == uram_blocks(width, depth) and est.resources["bram36"] == 0
    else:
        assert est.resources["uram"] == 0 and est.resources["bram36"] > 0


runner = pytest.importorskip("amp_hls.sim.runner")


@pytest.mark.verilator
@pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")
def test_a_design_with_memories_in_uram_is_bit_exact(tmp_path: Path) -> None:
    """The URAM branch of amp_ram, driven through amp_top against the numpy device (random stalls)."""
    from amp_hls.sim import project_bench as testbench

    graph = _wide_activation()
    root = generate_project(graph, tmp_path / "p", "zcu104", DeviceOptions(cache_slots=SLOTS)).root
    assert any(m.in_uram(True) for m in kernel_rtl(open_design(root), "act").memories)
    rng = np.random.default_rng(0)
    instances = [{"x": ((), rng.uniform(-40, 40, (1, WIDE))), "t": ((), rng.uniform(-2, 2, (1, WIDE)))}
                 for _ in range(12)]
    testbench.write_testbench(root)
    report = testbench.check(root, instances, SLOTS // 2, tmp_path / "run", tmp_path / "cache", seed=1)
    assert report.problems == []
    assert report.messages == 2 * 12  # per instance the tanh's output and its input's gradient (the loss is the host's)
