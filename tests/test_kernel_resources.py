"""What the routing kernels cost on the chip at 16 tag-cache slots (Yosys ``synth_xilinx -family
xc7``, ``amp_hls.codegen.estimate``), and that their payload memories map to RAM.

One small generated design holds a split with an unaligned slice (its buffer read through two
copies), a broadcast, a phi, an isu and a concat of four 32-wide parts (ggsnn-qm9's prop_msgs at
``ROWS`` rows: every part starts on a beat); each kernel is synthesised alone (top = its module, with
``amp_pkg`` and the library), once, through the estimate's content-hash cache, as is the shared
``amp_tag_table`` at the kernels' tag width. Split and broadcast have 8 columns and 4 rows, so
a part of 2-beat rows at 16 slots (8 Kbit) is large enough for block RAM.

The target is 1,500 LUT a kernel, the tag table included: split, broadcast, phi and isu are each
held to it whole. The tag table is a CAM in LUT-RAM (``hw/rtl/amp_tag_table.sv``: 64 x 1 columns
per 6-bit chunk and slot), held to ``TABLE_LUT_BUDGET`` and a few flip-flops (the used bits and
the scrub counter; a comparator per entry cost 1,513 LUT / 1,600 FF here). The concat's row
buffer is a word memory written and read by index (LUT-RAM), not a bit vector at run-time
offsets (barrel shifters: 7,844 LUT / 2,602 FF here, 7,816 / 2,604 for ggsnn-qm9's prop_msgs): it is held to
``CONCAT_LUT_BUDGET``, its flip-flops beyond the table's to fewer than the row buffer's bits. Split's and
broadcast's payload memories, read synchronously, must take block RAM, and the flip-flops beyond
the table's must be fewer than the payload bits (nothing of it left in registers).
"""

from __future__ import annotations

import pytest

from amp_hls.codegen.estimate import Estimate, estimate
from amp_hls.codegen.rtl import generate_rtl
from amp_hls.design import DeviceOptions, build_design, index_bits
from amp_hls.ir import Graph
from amp_hls.ir.nodes import inc
from amp_hls.wire import Kind, beats_per_row
from tests.helpers import needs_yosys, tag_table_top

SLOTS = 16
LUT_BUDGET = 1500  # the whole kernel
TABLE_LUT_BUDGET = 700  # the tag table alone (568 at 16 slots x 99 bits when written)
TABLE_FF_BUDGET = 64  # its used bits and scrub counter
ROWS = 4
SPLIT = (8, (3, 5))  # width, sizes: out1 starts at column 3, inside a beat
BROADCAST = (8, 2)  # width, copies
CONCAT = (32, 4)  # part width, parts
CONCAT_LUT_BUDGET = 2300  # 1,900 measured (16 slots, 4 rows), plus ~20%



pytestmark = [pytest.mark.yosys, needs_yosys]


def _graph() -> Graph:
    g = Graph("kernel_resources")
    width, sizes = SPLIT
    for y in g.split(g.source("sp_x", width=width, max_rows=ROWS), sizes, name="sp"):
        g.sink(y)
    width, copies = BROADCAST
    for y in g.broadcast(g.source("bc_x", width=width, max_rows=ROWS), copies, name="bc"):
        g.sink(y)
    g.sink(g.phi(g.source("phi_x0", width=4, max_rows=2), g.source("phi_x1", width=4, max_rows=2), name="phi"))
    g.sink(g.isu(g.source("isu_x", width=4, max_rows=2), inc(0, 1), name="isu"))
    width, parts = CONCAT
    g.sink(g.concat(*(g.source(f"cat_x{i}", width=width, max_rows=ROWS) for i in range(parts)), name="cat"))
    return g


@pytest.fixture(scope="module")
def estimates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Estimate]:
    """Each kernel's estimate, and the tag table's alone (``"table"``)."""
    root = tmp_path_factory.mktemp("kernel_resources")
    files = generate_rtl(build_design(_graph(), DeviceOptions(cache_slots=SLOTS)), ["sp", "bc", "phi", "isu", "cat"], root)
    out = {name: estimate([files.package, *files.library, path], f"k_{name}") for name, path in files.kernels.items()}
    table = root / "tag_table_top.sv"
    table.write_text(tag_table_top("tag_table_top", SLOTS))
    out["table"] = estimate([*(p for p in files.library if p.name == "amp_tag_table.sv"), table], "tag_table_top")
    return out


def _payload_bits(name: str) -> int:
    """Bits of the buffer and the parts split or broadcast keeps (64-bit beats, the parts
    addressed {slot, beat})."""
    width, outs = (SPLIT[0], SPLIT[1]) if name == "sp" else (BROADCAST[0], [BROADCAST[0]] * BROADCAST[1])
    buffer = ROWS * beats_per_row(Kind.DATA, width) + 1
    parts = sum(SLOTS * 2 ** index_bits(ROWS * beats_per_row(Kind.DATA, w)) for w in outs)
    return 64 * (buffer + parts)


@pytest.mark.parametrize("name", ["sp", "bc", "phi", "isu"])
def test_routing_kernels_within_budget(name: str, estimates: dict[str, Estimate]) -> None:
    used = estimates[name].resources["lut"]
    assert used < LUT_BUDGET, f"k_{name}: {used:.0f} LUT"


def test_the_tag_table_is_a_lut_ram_cam(estimates: dict[str, Estimate]) -> None:
    table = estimates["table"]
    lut, ff = table.resources["lut"], table.resources["ff"]
    assert lut < TABLE_LUT_BUDGET and ff < TABLE_FF_BUDGET, f"amp_tag_table: {lut:.0f} LUT, {ff:.0f} FF ({table.cells})"
    assert any(cell.startswith("RAM") for cell in table.cells), f"no LUT-RAM cells: {table.cells}"


@pytest.mark.parametrize("name", ["sp", "bc"])
def test_payload_memories_are_ram(name: str, estimates: dict[str, Estimate]) -> None:
    est = estimates[name]
    assert est.resources["bram36"] > 0, f"k_{name}: no block RAM ({est.cells})"
    extra_ffs = est.resources["ff"] - estimates["table"].resources["ff"]
    assert extra_ffs < _payload_bits(name), f"k_{name}: {extra_ffs:.0f} flip-flops beyond the table's: payload in registers?"


def test_concat_row_buffer_is_word_indexed(estimates: dict[str, Estimate]) -> None:
    est = estimates["cat"]
    width, parts = CONCAT
    row_bits = 64 * parts * beats_per_row(Kind.DATA, width)
    extra_ffs = est.resources["ff"] - estimates["table"].resources["ff"]
    assert est.resources["lut"] < CONCAT_LUT_BUDGET, f"k_cat: {est.resources['lut']:.0f} LUT"
    assert extra_ffs < row_bits, f"k_cat: {extra_ffs:.0f} flip-flops beyond the table's: the row buffer in registers?"
