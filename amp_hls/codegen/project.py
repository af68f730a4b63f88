"""A generated project: the design's HLS C++, its RTL, and (for a board) Vitis HLS / Vivado tcl, a
Makefile and a README, with ``manifest.json`` describing all of it.

``write_project(design, out_dir, board)`` runs the named steps on one lowered design
(``amp_hls.design.DeviceDesign``): ``generate_hls`` (kernels, boundary, C-sim driver), the board
files from ``templates/project/`` (``hls.tcl`` synthesises every kernel top and exports it as an
IP core; ``vivado.tcl`` builds PS, AXI DMA, one IP per kernel, one AXI-stream FIFO per stream,
bitstream, ``<name>.bit`` + ``<name>.hwh``), ``write_rtl`` (``amp_top`` and its sources, when every
device node kind has an RTL kernel), then the manifest, written once from the design. The block
design's streams and FIFO depths are the design's, the same the C simulation driver and the RTL
are generated from, so they cannot disagree. Every value that reaches tcl or make is a validated
identifier or a number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..design import BOARD_FIFO_MAX, BOARD_FIFO_MIN, DeviceDesign, DeviceOptions, build_design
from ..errors import AmpHlsError
from ..ir import GraphCore, load
from .boards import Board, load_board
from .hls import HlsProject, generate_hls
from .jinja import environment
from .rtl import TOP, generate_top, missing_kinds

# The IP cores hls.tcl exports and vivado.tcl instantiates: vendor:library:<top>:version.
IP = {"vendor": "amphls", "library": "hls", "version": "1.0", "solution": "sol"}
BD_NAME = "amp_bd"
DMA_CELL = "dma"  # the AXI DMA's block-design instance (vivado.tcl), an attribute of the overlay
BOUNDARY_SOURCE = "kernels/boundary.cpp"
PROJECT_FILES = ("hls.tcl", "vivado.tcl", "Makefile", "README.md")
RTL_DIR = "rtl"  # amp_top and its sources (codegen.rtl), when every device kind has RTL


@dataclass(frozen=True)
class BoardProject:
    hls: HlsProject
    board: Board
    name: str  # basename of the .bit and .hwh

    @property
    def root(self) -> Path:
        return self.hls.root


def generate_project(
    graph: GraphCore, out_dir: str | Path, board: str | Board, options: DeviceOptions | None = None
) -> BoardProject:
    """Lower ``graph`` and write its whole board project into ``out_dir``."""
    board = load_board(board) if isinstance(board, str) else board  # fails before anything is written
    hls = write_project(build_design(graph, options), out_dir, board)
    return BoardProject(hls, board, graph.name)


def write_project(design: DeviceDesign, out_dir: str | Path, board: Board | None = None,
                  rtl: bool = True) -> HlsProject:
    """The HLS sources, the board files (with ``board``), the RTL (with ``rtl``) and the manifest."""
    hls = generate_hls(design, out_dir)
    sections: dict[str, Any] = {}
    if board is not None:
        sections.update(_write_board_files(design, hls.root, board))
    if rtl:
        sections["rtl"] = write_rtl(design, hls.root)
    design.write_manifest(hls.root, **sections)
    return hls


def _write_board_files(design: DeviceDesign, root: Path, board: Board) -> dict[str, Any]:
    """``hls.tcl``, ``vivado.tcl``, ``Makefile``, ``README.md``; the manifest's board sections."""
    name = design.graph.name
    tops = [dict(top=k.top, node=k.name, source=f"kernels/{k.top}.cpp") for k in design.nodes.values()]
    tops += [dict(top=t, node=None, source=BOUNDARY_SOURCE) for t in ("k_demux", "k_mux")]
    streams = [
        dict(name=s.name, src=s.src, dst=s.dst, kind=s.kind.name, beats=s.max_message_beats,
             depth=design.board_fifo_depths[s.name])
        for s in design.wiring.streams
    ]
    for t in tops:  # the tcl and the Makefile name these files: they must exist
        if not (root / t["source"]).is_file():
            raise AmpHlsError(f"generate_hls wrote no {t['source']}")
    ctx: dict[str, Any] = dict(
        graph_name=name,
        name=name,
        bd_name=BD_NAME,
        dma=DMA_CELL,
        board=board,
        clock_mhz=f"{board.clock_mhz:g}",
        clock_period_ns=f"{board.clock_period_ns:.3f}",
        max_transfer_bytes=board.max_dma_transfer_bytes,
        ip=IP,
        tops=tops,
        streams=streams,
        host_in=dict(top="k_demux", port="host_in"),
        host_out=dict(top="k_mux", port="host_out"),
        fifo_min=BOARD_FIFO_MIN,
        fifo_max=BOARD_FIFO_MAX,
    )
    env = environment()
    for filename in PROJECT_FILES:
        (root / filename).write_text(env.get_template(f"project/{filename}.j2").render(**ctx))
    return {
        "board": board.to_json(),
        "bitstream": {"basename": name, "bit": f"{name}.bit", "hwh": f"{name}.hwh"},
        "dma": DMA_CELL,  # the overlay attribute host.pynq drives
        "dma_length_bits": board.dma_length_width,  # its largest transfer: 2**bits - 1 bytes
        "ip": {**IP, "tops": [t["top"] for t in tops]},
        "streams": [
            {"name": s["name"], "from": str(s["src"]), "to": str(s["dst"]), "kind": s["kind"],
             "max_message_beats": s["beats"], "fifo_depth": s["depth"]}
            for s in streams
        ],
    }


def write_rtl(design: DeviceDesign, root: Path) -> dict[str, Any]:
    """``root/rtl/*.sv`` and the manifest's ``rtl`` entry (top, sources in compile order) when
    every device node kind has an RTL kernel; otherwise no RTL at all (a previous generation's
    included) and an entry naming the kinds that lack one."""
    rtl_dir = root / RTL_DIR
    for old in rtl_dir.glob("*.sv"):
        old.unlink()
    missing = missing_kinds(design)
    if missing:
        return {"missing_kinds": list(missing)}
    return {"top": TOP, "sources": [p.name for p in generate_top(design, rtl_dir)]}


def project_rtl(root: str | Path) -> tuple[list[Path], str, str | None]:
    """A generated project's RTL: the sources in compile order, the top, and the board it was
    generated for (None for a project without one); AmpHlsError when it holds no RTL."""
    root = Path(root)
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise AmpHlsError(f"{root} is not an amp-hls project (manifest.json: {exc})") from None
    rtl = manifest.get("rtl") if isinstance(manifest, dict) else None
    if isinstance(rtl, dict) and rtl.get("missing_kinds"):
        raise AmpHlsError(f"the project in {root} has no RTL: no RTL kernel for node kind(s) "
                          f"{', '.join(map(str, rtl['missing_kinds']))}")
    if not isinstance(rtl, dict) or not isinstance(rtl.get("top"), str) or not isinstance(rtl.get("sources"), list) \
            or not rtl["sources"]:
        raise AmpHlsError(f"{root}/manifest.json lists no RTL (an \"rtl\" entry with top and sources): "
                          "regenerate the project with an amp-hls that writes RTL")
    board = manifest.get("board")
    return [root / RTL_DIR / str(s) for s in rtl["sources"]], rtl["top"], \
        board.get("name") if isinstance(board, dict) else None


def open_design(root: str | Path) -> DeviceDesign:
    """The design of the project in ``root``, rebuilt from ``graph.json`` and the manifest's
    options (the same design ``write_project`` wrote)."""
    root = Path(root)
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise AmpHlsError(f"{root} is not an amp-hls project (manifest.json: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != "amp-hls.manifest":
        raise AmpHlsError(f"{root}/manifest.json is not an amp-hls manifest")
    try:
        graph = load(root / "graph.json")
    except OSError as exc:
        raise AmpHlsError(f"{root} has no graph.json: {exc}") from None
    try:
        options = DeviceOptions.from_json(manifest)
    except (KeyError, TypeError) as exc:
        raise AmpHlsError(f"{root}/manifest.json lacks the HLS options: {exc}") from None
    return build_design(graph, options)


def open_project(root: str | Path) -> HlsProject:
    """The HLS project a previous ``write_project`` wrote into ``root``."""
    root = Path(root)
    design = open_design(root)
    files = [root / "kernels" / f"{k.top}.cpp" for k in design.nodes.values()]
    files.append(root / BOUNDARY_SOURCE)
    missing = [str(f) for f in [*files, root / "csim" / "amp_csim.cpp"] if not f.is_file()]
    if missing:
        raise AmpHlsError(f"the project in {root} lacks {', '.join(missing)}: regenerate it")
    return HlsProject(root, design, tuple(files))
