"""The resource model (cycles/resources.py): its coefficient file complete, its shape (monotone in
parallelism and cache slots, every kind priced), and, under Yosys, within 25% of synthesis on a
few small kernels the calibration grid does not hold (one synthesis each, cached)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from amp_hls.cycles import resources as rm
from amp_hls.cycles.folding import candidates
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from bench import calibrate_resources as cal
from tests.helpers import needs_yosys

SLOTS = (4, 16, 64, 256)



def test_the_coefficient_file_is_complete_and_checked() -> None:
    doc = json.loads(rm.COEFFICIENTS_FILE.read_text())
    c = rm.coefficients_from_json(doc)
    assert set(rm.priced_kinds()) <= set(c.kinds) and set(rm.BOUNDARY) == set(c.boundary)
    for row in [*c.kinds.values(), *c.boundary.values()]:
        assert row.placement in rm.PLACEMENTS
        for r in rm.RESOURCES:
            assert set(row.coefficients[r]) == set(rm.USES[r]) and min(row.coefficients[r].values()) >= 0
    assert doc["calibrated"] and doc["rtl"] and doc["family"] == "xc7"
    broken = {**doc, "kinds": {k: v for k, v in doc["kinds"].items() if k != "linear"}}
    with pytest.raises(AmpHlsError, match="no row for linear: rerun python -m bench.calibrate_resources"):
        rm.coefficients_from_json(broken)
    negative = json.loads(json.dumps(doc))
    negative["kinds"]["cond"]["lut"]["one"] = -1
    with pytest.raises(AmpHlsError, match="cond.lut must give a non-negative number"):
        rm.coefficients_from_json(negative)


def test_every_priced_kind_has_a_grid_point_and_costs_something() -> None:
    assert set(rm.priced_kinds()) == set(cal.GRID)
    for kind, points in cal.GRID.items():
        p = points[0]
        design = cal.design_of(p.graph, p.slots, {p.node: p.parallelism} if p.parallelism else None)
        used = rm.kernel_resources(design, p.node)
        assert used.lut > 0 and used.ff > 0, kind


def test_a_linear_grows_with_its_parallelism() -> None:
    design = cal.design_of("mlp", 16)
    prev = None
    for p in candidates(design.nodes["fc0"].node):  # type: ignore[arg-type]
        used = rm.kernel_resources(rm.with_parallelism(design, "fc0", p), "fc0")
        if prev is not None:
            assert used.lut >= prev.lut and used.dsp >= prev.dsp + 1 - 1e-9, p
        prev = used
    assert prev is not None and prev.dsp >= 64


@pytest.mark.parametrize("kind", sorted(cal.GRID))
def test_every_kernel_grows_with_its_cache(kind: str) -> None:
    p = cal.GRID[kind][0]
    prev = None
    for slots in SLOTS:
        design = cal.design_of(p.graph, slots, {p.node: p.parallelism} if p.parallelism else None)
        used = rm.kernel_resources(design, p.node)
        if prev is not None:
            assert used.ff >= prev.ff and used.lut + 36 * used.bram36 * 16 >= prev.lut + 36 * prev.bram36 * 16, slots
        prev = used


def test_the_whole_design_adds_the_boundary_and_the_fifos() -> None:
    design = build_design(cal.GRAPHS["mlp"](), DeviceOptions(cache_slots=16))
    used = rm.design_resources(design)
    kernels = sum((r for r in used.kernels.values()), rm.Resources())
    assert dataclasses.asdict(used.total) == pytest.approx(dataclasses.asdict(kernels + used.boundary + used.fifos))
    assert used.fifos.ff > 0 and used.boundary.lut > 0
    bigger = rm.design_resources(design, options=DeviceOptions(cache_slots=64))
    assert bigger.fifos.bram36 + bigger.fifos.lut > used.fifos.bram36 + used.fifos.lut  # deeper FIFOs
    assert used.top_users("dsp")[0][0] in ("act0", "fc0", "head")


def test_memories_are_placed_by_size_then_cost() -> None:
    assert rm.Memory("deep", 16, 4096).in_bram() and rm.Memory("deep", 16, 4096).bram36 == 2
    assert rm.Memory("wide", 1024, 64).in_bram()  # 15 half-empty RAMB36: the cost rule takes LUT-RAM, the RTL marks it
    assert not rm.Memory("wide", 1024, 64).in_bram(use_uram=True)  # but not on a board with URAM
    assert not rm.Memory("wide", 1024, 8).in_bram()  # under BLOCK_MIN_BITS: by cost, LUT-RAM
    assert not rm.Memory("tiny", 64, 8).in_bram()


def test_the_rtl_is_read_for_its_memories_and_tags() -> None:
    design = cal.design_of("mlp", 16, {"fc0": 8})
    found = rm.kernel_rtl(design, "fc0")
    mems = {m.name: m for m in found.memories}
    assert mems["x_ram"].width == 8 * 16 and mems["x_ram"].sync  # P lanes of 16-bit elements
    assert found.tag_bits > 16 * 32  # 16 entries of at least a 32-bit key
    assert rm.read_rtl("module m; localparam integer A = 3, B = A * 2;\n  reg [B-1:0] r [0:A];\n"
                       "  amp_ram #(.W(B), .AW(A + 1)) u (\nendmodule", design.options.numerics).memories == (
        rm.Memory("u", 6, 16), rm.Memory("r", 6, 4, sync=False))
    rom = rm.read_rtl("amp_rom #(.W(16), .AW(10), .DEPTH(1024)) t (", design.options.numerics).memories[0]
    assert rom == rm.Memory("t", 16, 1024, rom=True) and rom.reads == 2  # one table, two lanes' reads
    assert rom.in_bram() and rom.bram36 == 0.5 and not rom.in_uram(True)  # one RAMB18; a URAM has no initial contents
    with pytest.raises(AmpHlsError, match="amp_ram u: W='N', AW='4' is not an integer constant"):
        rm.read_rtl("amp_ram #(.W(N), .AW(4)) u (", design.options.numerics)


# kernels outside the calibration grid: (graph, node, cache slots, parallelism)
HELD_OUT = [("mlp", "head", 8, 2), ("mlp", "act0", 8, None), ("list-rnn", "h", 8, None),
            ("ggsnn-babi15", "prop_reset", 8, None), ("ggsnn-qm9", "prop_h_fan0", 8, None)]


@pytest.mark.yosys
@needs_yosys
@pytest.mark.parametrize("graph,node,slots,p", HELD_OUT)
def test_the_model_is_within_a_quarter_of_yosys(graph: str, node: str, slots: int, p: int | None) -> None:
    design = cal.design_of(graph, slots, {node: p} if p else None)
    yosys = cal.measured(cal.synth_kernel(design, node))
    model = rm.kernel_resources(design, node)
    for r in ("lut", "ff", "dsp", "bram36"):
        want, got = yosys[r], getattr(model, r)
        assert abs(got - want) <= max(0.25 * want, 1.0 if r in ("dsp", "bram36") else 25.0), (r, got, want)


def test_the_rows_are_the_fit_of_the_counts_the_file_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--refit`` on the recorded Yosys counts gives back every row: the file was fitted by this
    code on these features (a change of the model's features or fit that is not refitted fails
    here). Only while the file was fitted on today's RTL; refused otherwise."""
    doc = json.loads(rm.COEFFICIENTS_FILE.read_text())
    copy = tmp_path / "coefficients.json"
    if doc["rtl"] != cal.rtl_key():
        copy.write_text(json.dumps(doc))
        with pytest.raises(SystemExit, match="not today's; rerun without --refit"):
            cal.main(["--refit", "--out", str(copy)])
        pytest.skip("the coefficient file was fitted on other RTL: make calibrate-resources")
    copy.write_text(json.dumps(doc))
    assert cal.main(["--refit", "--out", str(copy)]) == 0
    capsys.readouterr()
    again = json.loads(copy.read_text())
    assert again["rtl"] == doc["rtl"] and again["calibrated"] == doc["calibrated"] and again["refitted"]
    for part in ("kinds", "boundary"):
        for name, row in doc[part].items():
            for r in rm.RESOURCES:
                assert again[part][name][r] == pytest.approx(row[r], rel=1e-4, abs=1e-4), (name, r)


def test_an_unaligned_linear_is_priced_with_its_element_shifters() -> None:
    """fc0 (64 inputs) at P=13 shifts beats by any element, at P=16 places them by group
    (``design.linear_aligned``): Yosys counts 5,764 and 5,737 LUT for 13 and 16 MACs (the
    calibration grid): the 3 MACs fewer cost more. So does the model, which prices the shifters of
    the one and none of the other."""
    assert rm.shift_kbits(64, 16) == rm.shift_kbits(64, 64) == rm.shift_kbits(10, 10) == rm.shift_kbits(64, 1) == 0
    assert rm.shift_kbits(64, 13) > rm.shift_kbits(64, 6) > rm.shift_kbits(64, 2) > 0
    p13, p16 = (rm.kernel_resources(cal.design_of("mlp", 4, {"fc0": p}), "fc0") for p in (13, 16))
    assert p13.lut > p16.lut and p13.dsp == 13 and p16.dsp == 16


def test_lut_ram_a_row_prices_is_priced_in_lut_too() -> None:
    """Every row, at any features: a kilobit more memory in LUT-RAM adds to LUT at least the
    LUT-RAM it adds (LUT-RAM is part of LUT). The rows fitted on total LUT broke this: the Linear's
    priced 22.6 LUT-RAM a kilobit and no LUT."""
    c = rm.load_coefficients()
    base = {f: 1.0 for f in rm.FEATURES}
    more = {**base, "kbits": base["kbits"] + 1.0}
    for name, row in [*c.kinds.items(), *c.boundary.items()]:
        before, after = row.price(base), row.price(more)
        assert after.lut - before.lut >= after.lutram - before.lutram - 1e-9, name
        assert rm.fitted_count({"lut": after.lut, "lutram": after.lutram}, "lut") == pytest.approx(
            sum(k * more[f] for f, k in row.coefficients["lut"].items())), name
