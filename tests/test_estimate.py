"""The Yosys resource estimate: cell counts, board fit, cache, and ``amp-hls estimate``.

The design is a generated project's RTL (``amp_top``: one relu kernel, the boundary demux/mux and
the stream FIFOs), synthesised once by ``synth_xilinx -family xc7``; every later call in this
module hits the content-hash cache. A copy of the PYNQ-Z2 board with tiny capacities gives the
does-not-fit case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_hls.cli import main
from amp_hls.codegen.boards import board_from_json, boards_dir, load_board
from amp_hls.codegen.estimate import (
    Estimate,
    estimate,
    family,
    fit,
    format_fit,
    misfits,
    parse_stat,
)
from amp_hls.codegen.project import generate_project, project_rtl
from amp_hls.design import DeviceOptions
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph
from tests.helpers import needs_yosys


def _tiny_board(tmp: Path) -> Path:
    """pynq-z2 with room for almost nothing: 10 LUTs, 10 FFs, no DSP, no BRAM."""
    doc = json.loads((boards_dir() / "pynq-z2.json").read_text())
    doc["name"] = "tiny"
    doc["resources"] = {"lut": 10, "ff": 10, "dsp": 0, "bram36": 0, "uram": 0}
    path = tmp / "tiny.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A generated project with its RTL, and the estimate cache shared by this module's tests
    (laid out as ``$XDG_CACHE_HOME/amp-hls/estimate``, the CLI's default)."""
    g = Graph("estimate_chain")
    h = g.activation(g.source("x", width=6, max_rows=3), "relu", name="act")
    g.loss(h, g.source("t", width=6, max_rows=3), "mse")
    root = tmp_path_factory.mktemp("estimate")
    generate_project(g, root / "proj", "pynq-z2", DeviceOptions(cache_slots=4))
    return root / "proj", root / "xdg" / "amp-hls" / "estimate"


@pytest.mark.yosys
@needs_yosys
def test_estimate_fits_and_caches(project: tuple[Path, Path]) -> None:
    root, cache = project
    sources, top, generated_for = project_rtl(root)
    assert (top, generated_for) == ("amp_top", "pynq-z2")
    first = estimate(sources, top, "xc7", cache=cache)
    used = first.resources
    assert not first.cached and first.seconds > 0
    assert used["lut"] > 100 and used["ff"] > 100  # the tag cache, the FSM, the boundary
    assert first.unclassified == {}, "every cell Yosys emitted maps to a resource"
    again = estimate(sources, top, "xc7", cache=cache)
    assert again.cached and again.cells == first.cells

    board = load_board("pynq-z2")
    assert family(board) == "xc7" and misfits(first, board) == []
    text = format_fit(first, board)
    for label in ("LUT", "FF", "DSP", "BRAM36", "53,200"):
        assert label in text
    assert "URAM" not in text  # the Z-7020 has none and none is used


@pytest.mark.yosys
@needs_yosys
def test_estimate_names_what_does_not_fit(project: tuple[Path, Path], tmp_path: Path) -> None:
    root, cache = project
    sources, top, _ = project_rtl(root)
    est = estimate(sources, top, "xc7", cache=cache)
    tiny = board_from_json(json.loads(_tiny_board(tmp_path).read_text()), "tiny")
    over = misfits(est, tiny)
    assert [line.split()[0] for line in over] == ["LUT", "FF"]  # DSP/BRAM: none used, none needed
    assert all(u.fits == (u.resource not in ("lut", "ff")) for u in fit(est, tiny))


@pytest.mark.yosys
@needs_yosys
def test_estimate_cli(project: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    root, cache = project
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent))  # the CLI's default cache: this one
    assert main(["estimate", str(root)]) == 0
    out = capsys.readouterr().out
    assert "amp_top" in out and "pynq-z2" in out and "cached" in out
    assert main(["estimate", str(root), "--board", str(_tiny_board(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert "amp_top does not fit tiny" in err and "LUT" in err and "FF" in err and "DSP" not in err

    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    try:
        manifest_path.write_text(json.dumps({**manifest, "rtl": {"missing_kinds": ["group"]}}))
        assert main(["estimate", str(root)]) == 2
        assert "no RTL kernel for node kind(s) group" in capsys.readouterr().err
        manifest_path.write_text(json.dumps({k: v for k, v in manifest.items() if k != "rtl"}))
        assert main(["estimate", str(root)]) == 2
        assert 'lists no RTL' in capsys.readouterr().err
    finally:
        manifest_path.write_text(json.dumps(manifest))


@pytest.mark.yosys
@needs_yosys
def test_estimate_reports_yosys_failures(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sv"
    bad.write_text("module bad(input wire a, output wire b);\n  assign b = ;\nendmodule\n")
    with pytest.raises(AmpHlsError, match="Yosys failed"):
        estimate([bad], "bad", cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.yosys
@needs_yosys
def test_estimate_times_out(project: tuple[Path, Path], tmp_path: Path) -> None:
    sources, top, _ = project_rtl(project[0])
    with pytest.raises(AmpHlsError, match="did not finish within 0.5 s"):
        estimate(sources, top, cache=tmp_path / "empty", timeout=0.5)


def test_cell_map() -> None:
    """Xilinx cells onto board resources: LUTRAM counts its LUTs, a RAMB18 half a BRAM36."""
    stat = {"design": {"num_cells_by_type": {
        "LUT2": 3, "LUT6": 4, "INV": 1, "RAM32M": 2, "SRLC32E": 1, "FDRE": 5, "FDCE": 2,
        "DSP48E1": 3, "RAMB36E1": 1, "RAMB18E1": 3, "CARRY4": 7, "MUXF7": 1, "XORCY": 2}}}
    est = Estimate("top", "xc7", parse_stat(stat), 1.0, cached=False)
    assert est.resources == {"lut": 3 + 4 + 1 + 8 + 1, "ff": 7, "dsp": 3, "bram36": 2.5, "uram": 0}
    assert est.lutram == 9
    assert est.unclassified == {"XORCY": 2}  # named in the output, never silently dropped
    assert "XORCY x2" in format_fit(est, load_board("pynq-z2"))
    with pytest.raises(AmpHlsError, match="num_cells_by_type"):
        parse_stat({"modules": {}})


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(AmpHlsError, match="does not exist"):
        estimate([tmp_path / "missing.sv"], "top")
    with pytest.raises(AmpHlsError, match="no RTL sources"):
        estimate([], "top")
    assert family(load_board("zcu104")) == "xcup"


@pytest.mark.yosys
@needs_yosys
def test_estimate_json(project: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    root, cache = project
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache.parent.parent))
    out = tmp_path / "estimate.json"
    assert main(["estimate", str(root), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["top"], doc["board"], doc["family"], doc["fits"], doc["misfits"]) == ("amp_top", "pynq-z2", "xc7", True, [])
    assert doc["resources"]["lut"] > 100 and doc["cells"] and doc["unclassified"] == {}
    assert {u["resource"] for u in doc["fit"]} >= {"lut", "ff", "dsp", "bram36"}
    assert all(u["fits"] and 0 <= u["fraction"] < 1 for u in doc["fit"])
    assert f"wrote {out}" in capsys.readouterr().out
