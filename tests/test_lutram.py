"""LUT-RAM instead of block RAM for shallow memories: the one rule (amp_hls/memories.py) as the RTL
applies it (Yosys maps exactly the cells ``lutram_cost`` counts), as the resource model prices it,
as the folding chooses it when block RAM stops it, and the LUT-RAM branch of amp_ram simulated
bit-exact under Verilator."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls import api
from amp_hls.cli import main
from amp_hls.codegen import rtl
from amp_hls.codegen.boards import load_board
from amp_hls.codegen.project import generate_project, open_design
from amp_hls.cycles.folding import FitError, pin
from amp_hls.cycles.resources import (
    Memory,
    design_resources,
    fifo_features,
    fifo_memory,
    kernel_rtl,
    split_moved,
)
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from amp_hls.host.settings import generation_options
from amp_hls.ir import Graph
from amp_hls.memories import BLOCK_MIN_BITS, LUTRAM_DEPTHS, in_block, in_lutram, lutram_cost
from amp_hls.models import MODELS
from tests.helpers import needs_yosys, synth_amp_ram

ZCU = load_board("zcu104")
WIDE = DeviceOptions(cache_slots=128, max_in_flight=128)  # mlp's fc0 at P=64 caches x as 1,024 x 128


def test_the_rule_takes_shallow_memories_not_in_uram() -> None:
    assert in_lutram(3072, 128, False, 128) and in_lutram(65, 256, True, 256)
    assert not in_lutram(3072, 256, False, 128) and not in_lutram(16, 64, False, 0)
    assert LUTRAM_DEPTHS == (128, 256)
    # RAM64M cells of 3 bits x 64 words, 4 LUTs each; a LUT a bit choosing among up to 4 of them
    assert lutram_cost(72, 128) == (48 * 4 + 72, 48 * 4, 72)
    assert lutram_cost(64, 256) == (88 * 4 + 64, 88 * 4, 64)
    assert lutram_cost(16, 64) == (6 * 4, 6 * 4, 16)
    with pytest.raises(AmpHlsError, match="lutram_depth must be 0 .* or one of 128, 256, got 100"):
        DeviceOptions(lutram_depth=100)
    package = rtl.render_package(DeviceOptions().numerics, lutram_depth=128)
    assert "localparam integer LUTRAM_DEPTH = 128;" in package


@pytest.mark.yosys
@needs_yosys
@pytest.mark.parametrize(("width", "address_bits"), [(768, 7), (64, 8), (64, 9)])
def test_yosys_maps_to_lutram_exactly_what_the_rule_names(width: int, address_bits: int, tmp_path: Path) -> None:
    """amp_ram under ``synth_xilinx`` with LUTRAM_DEPTH 256: the cells, LUTs and read register
    ``lutram_cost`` counts (give or take the write-enable decode) when the rule names the memory,
    block RAM when it is deeper."""
    est = synth_amp_ram(tmp_path, width, address_bits, rtl.render_package(DeviceOptions().numerics, lutram_depth=256), "xc7")
    depth = 1 << address_bits
    if in_lutram(width, depth, False, 256):
        lut, lutram, ff = lutram_cost(width, depth)
        assert est.resources["bram36"] == 0 and est.resources["ff"] == ff
        assert est.cells["RAM64M"] * 4 == lutram
        assert lut <= est.resources["lut"] <= lut + 8
    else:
        assert est.resources["bram36"] > 0


def test_wide_shallow_memories_go_to_block_ram_unless_lutram_depth_names_them() -> None:
    # Yosys' cost rule would put 768 x 64 in LUT-RAM (256 RAM64M against 11 RAMB36 an eighth full)
    assert in_block(768, 64, False, 0) and in_block(16, BLOCK_MIN_BITS // 16, False, 0)
    assert not in_block(64, 64, False, 0)  # 4 Kbit: by cost
    assert not in_block(768, 64, False, 128)  # named by lutram_depth: LUT-RAM
    assert not in_block(72, 4096, True, 0) and not in_block(768, 64, True, 0)  # a board with URAM: by cost
    assert "localparam integer BLOCK_MIN_BITS = 16384;" in rtl.render_package(DeviceOptions().numerics)


@pytest.mark.yosys
@needs_yosys
@pytest.mark.parametrize(("width", "address_bits", "lutram_depth"), [(768, 6, 0), (768, 6, 128), (64, 6, 0)])
def test_yosys_puts_in_block_ram_exactly_what_the_rule_marks(width: int, address_bits: int, lutram_depth: int,
                                                              tmp_path: Path) -> None:
    """amp_ram under ``synth_xilinx``: a wide shallow memory (48 Kbit, 64 words) in block RAM
    where the cost rule alone would spend 1,024 LUTs on it, in LUT-RAM where lutram_depth names
    it; a small one (4 Kbit) where the cost rule puts it, in LUT-RAM."""
    package = rtl.render_package(DeviceOptions().numerics, lutram_depth=lutram_depth)
    est = synth_amp_ram(tmp_path, width, address_bits, package, "xc7")
    depth = 1 << address_bits
    if in_block(width, depth, False, lutram_depth):
        assert est.resources["bram36"] == Memory("m", width, depth).bram36 and est.lutram == 0
    else:
        assert est.resources["bram36"] == 0 and est.lutram > 0


def test_the_model_moves_those_memories_from_block_ram_to_lutram() -> None:
    graph = pin(MODELS["mlp"].build(), {"fc0": 64})
    plain = build_design(graph, WIDE)
    moved = build_design(graph, dataclasses.replace(WIDE, lutram_depth=128))
    mems = kernel_rtl(plain, "fc0").memories
    x = next(m for m in mems if m.name == "x_ram")
    assert (x.width, x.depth) == (1024, 128) and x.in_bram()
    kept, gone = split_moved(mems, "cost", moved.options)
    assert x in gone and not [m for m in kept if m.depth <= 128 and m.in_bram()]  # W and G (32 words) too
    a, b = design_resources(plain).kernels["fc0"], design_resources(moved).kernels["fc0"]
    lut, lutram, ff = (sum(lutram_cost(m.width, m.depth)[i] for m in gone) for i in range(3))
    assert a.bram36 - b.bram36 == pytest.approx(sum(m.bram36 for m in gone), rel=1e-3)  # every RAMB36 they took
    # their cells and read registers, less what the row's fit priced a RAMB36's neighbours at
    assert (b.lut - a.lut, b.lutram - a.lutram, b.ff - a.ff) == pytest.approx((lut, lutram, ff), rel=0.05)
    # an amp_fifo keeps its entries in an amp_ram: 128 x 65 bits, a RAMB36, moved too
    assert fifo_features(7)["bram"] == 1 and fifo_features(7, kept=False)["bram"] == 0
    assert split_moved([fifo_memory(7)], "cost", DeviceOptions(lutram_depth=128)) == ([], [fifo_memory(7)])
    assert split_moved([fifo_memory(8)], "cost", DeviceOptions(lutram_depth=128)) == ([fifo_memory(8)], [])


def test_block_ram_that_stops_the_folding_moves_shallow_memories_to_lutram() -> None:
    """ggsnn-qm9 does not fit kv260 in block RAM even at one instance in flight; with its shallow
    memories in LUT-RAM it does, and generate's folding finds that by itself."""
    spec = MODELS["ggsnn-qm9"]
    options = generation_options(spec, spec.build(), api.device_options(), muf_given=False, cache_given=False)
    with pytest.raises(FitError, match="does not fit kv260: BRAM36") as refused:
        api.fold_fitting(spec, "kv260", options, lutram_depth=0)
    assert refused.value.resource == "bram36"
    folding, chosen = api.fold_fitting(spec, "kv260", options)
    assert folding.lutram_depth == chosen.lutram_depth in LUTRAM_DEPTHS
    assert folding.resources.total.bram36 <= 0.9 * 144 and folding.resources.total.lut <= 0.9 * 117120


def test_generate_records_where_the_memories_go(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "mlp", "--board", "zcu104", "--lutram-depth", "128", "-o", str(tmp_path / "p")]) == 0
    assert "memories of at most 128 words in LUT-RAM" in capsys.readouterr().out
    root = tmp_path / "p"
    assert json.loads((root / "manifest.json").read_text())["lutram_depth"] == 128
    assert open_design(root).options.lutram_depth == 128
    assert "localparam integer LUTRAM_DEPTH = 128;" in (root / "rtl" / rtl.PACKAGE_FILE).read_text()
    with pytest.raises(SystemExit):
        main(["generate", "mlp", "--lutram-depth", "100", "-o", str(tmp_path / "q")])
    assert main(["generate", "mlp", "--flow", "hls", "--lutram-depth", "128", "-o", str(tmp_path / "h")]) == 2
    assert "places the RTL's memories only" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()
    with pytest.raises(AmpHlsError, match="places the RTL's memories only"):
        api.generate("mlp", tmp_path / "h", board="zcu104", flow="hls", options=DeviceOptions(lutram_depth=128))


runner = pytest.importorskip("amp_hls.sim.runner")


@pytest.mark.verilator
@pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")
def test_a_design_with_memories_in_lutram_is_bit_exact(tmp_path: Path) -> None:
    """The LUT-RAM branch of amp_ram (every memory of the design: at most 128 words), driven
    through amp_top against the numpy device (random stalls)."""
    from amp_hls.sim import project_bench as testbench

    g = Graph("lutram_tanh")
    g.loss(g.tanh(g.linear(g.source("x", width=8), 6, name="fc"), name="act"), g.source("t", width=6), "mse", name="l")
    options = DeviceOptions(cache_slots=8, lutram_depth=128)
    root = generate_project(g, tmp_path / "p", "pynq-z2", options).root
    design = open_design(root)
    assert design.options.lutram_depth == 128
    assert all(m.depth <= 128 for m in kernel_rtl(design, "fc").memories)
    rng = np.random.default_rng(0)
    instances = [{"x": ((), rng.uniform(-4, 4, (1, 8))), "t": ((), rng.uniform(-1, 1, (1, 6)))} for _ in range(10)]
    testbench.write_testbench(root)
    report = testbench.check(root, instances, 4, tmp_path / "run", tmp_path / "cache", seed=1)
    assert report.problems == []
    assert report.messages > 0
