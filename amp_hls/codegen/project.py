"""A generated project: the design's HLS C++, its RTL, and (for a board) the Vivado project of one
of two flows, a Makefile and a README, with ``manifest.json`` describing all of it.

``write_project(design, out_dir, board, flow=...)`` runs the named steps on one lowered design
(``amp_hls.design.DeviceDesign``): ``generate_hls`` (kernels, boundary, C-sim driver), ``write_rtl``
(``amp_top`` and its sources when every device node kind has an RTL kernel, and the board
wrapper ``amp_board``: ``amp_top`` with ``amp_pack`` on host_out), the board files from
``templates/project/``, then the manifest, written once from the design. Two flows:

- ``rtl`` (the default): ``vivado.tcl`` adds the verified SystemVerilog and instantiates
  ``amp_board`` as a module reference in the PS + AXI DMA block design: the bitstream holds the
  RTL the tests run bit-exact (under Verilator) and the cycle model and the Yosys estimate
  describe, the control unit (status, soft reset) included.
- ``hls``: ``hls.tcl`` synthesises every C++ kernel top with Vitis HLS and exports it as an IP
  core (with a generated C++ testbench, ``tb/``, for csim and cosim), and ``vivado.tcl`` joins the
  cores with one ``axis_data_fifo`` per stream, as deep as the RTL's FIFO on that stream
  (``DeviceDesign.board_fifo_depths``).

The streams, FIFO depths and host-link buffers are the design's, the same the C simulation
driver and the RTL are generated from, so they cannot disagree. Every value that reaches tcl or
make is a validated identifier or a number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..control import STATS_WIDTH
from ..design import (
    BOARD_FIFO_MAX,
    BOARD_FIFO_MIN,
    DeviceDesign,
    DeviceOptions,
    board_fifo_problems,
    build_design,
)
from ..errors import AmpHlsError
from ..ir import GraphCore, load
from ..output import ProjectOutput, check_output_dir
from ..resources import hw_dir
from ..wire import BEAT_BYTES, Kind, message_beats
from .boards import Board, load_board
from .hls import HlsProject, generate_hls
from .jinja import environment
from .rtl import TOP, generate_top, missing_kinds

FLOWS = ("rtl", "hls")  # rtl: amp_top into Vivado (the default); hls: Vitis HLS kernel cores
# The IP cores hls.tcl exports and vivado.tcl instantiates: vendor:library:<top>:version.
IP = {"vendor": "amphls", "library": "hls", "version": "1.0", "solution": "sol"}
BD_NAME = "amp_bd"
DMA_CELL = "dma"  # the AXI DMA's block-design instance (vivado.tcl), an attribute of the overlay
DEVICE_CELL = "amp"  # the rtl flow's amp_board instance
BOUNDARY_SOURCE = "kernels/boundary.cpp"
FLOW_FILES = {"rtl": ("vivado.tcl", "Makefile", "README.md"),
              "hls": ("hls.tcl", "vivado.tcl", "Makefile", "README.md")}
PROJECT_FILES = FLOW_FILES["hls"]  # every board file either flow may write
RTL_DIR = "rtl"  # amp_top and its sources (codegen.rtl), when every device kind has RTL
BOARD_DIR = "board"  # the rtl flow's board wrapper and the packer
BOARD_TOP = "amp_board"  # amp_top + amp_pack, what the rtl flow's block design instantiates
PACK_FILE = "amp_pack.sv"  # hand-written, in hw/rtl
DEFAULT_LENGTH_BITS = 26  # an AXI DMA's widest buffer length register (PG021)
BUFFER_MIN = 64 * 1024  # the smallest DMA buffer the driver allocates (bytes)
BUFFER_ALIGN = 4096
PACK_IDLE_CYCLES = 16  # quiet cycles after a message that end a host_out packet (amp_pack)


@dataclass(frozen=True)
class BoardProject:
    hls: HlsProject
    board: Board
    name: str  # basename of the .bit and .hwh
    flow: str = "rtl"

    @property
    def root(self) -> Path:
        return self.hls.root


def generate_project(
    graph: GraphCore, out_dir: str | Path, board: str | Board, options: DeviceOptions | None = None,
    flow: str = "rtl", force: bool = False,
) -> BoardProject:
    """Lower ``graph`` and write its whole board project into ``out_dir`` (``write_project``)."""
    check_output_dir(out_dir, force)  # a directory it may not write into fails before any work
    board = load_board(board) if isinstance(board, str) else board  # fails before anything is written
    if flow not in FLOWS:
        raise AmpHlsError(f"unknown flow {flow!r}; flows: {', '.join(FLOWS)}")
    hls = write_project(build_design(graph, (options or DeviceOptions()).on_board(board)), out_dir, board, flow=flow,
                        force=force)
    return BoardProject(hls, board, graph.name, flow)


def write_project(design: DeviceDesign, out_dir: str | Path, board: Board | None = None,
                  rtl: bool = True, flow: str = "rtl", force: bool = False) -> HlsProject:
    """``_write_project`` into a staging directory, then into ``out_dir`` under the rules of
    ``amp_hls.output``: ``out_dir`` is new, empty or a project amp-hls wrote, and no file amp-hls
    did not write (or that a user changed) is overwritten unless ``force``, or ever deleted."""
    with ProjectOutput(out_dir, force) as out:
        hls = _write_project(design, out.stage, board, rtl, flow)
    return HlsProject(out.root, hls.design, tuple(out.moved(f) for f in hls.kernel_files))


def _write_project(design: DeviceDesign, out_dir: Path, board: Board | None, rtl: bool, flow: str) -> HlsProject:
    """The HLS sources, the RTL (with ``rtl``), the board files of ``flow`` (with ``board``) and
    the manifest."""
    if flow not in FLOWS:
        raise AmpHlsError(f"unknown flow {flow!r}; flows: {', '.join(FLOWS)}")
    if board is not None and flow == "hls":
        deep = board_fifo_problems(design)
        if deep:  # before anything is written
            raise AmpHlsError(f"the hls flow puts an axis_data_fifo (at most {BOARD_FIFO_MAX} beats) on every "
                              f"stream, and {'; '.join(deep)}: use --flow rtl, or fewer --cache-slots")
    link = host_link(design, board)
    hls = generate_hls(design, out_dir)
    sections: dict[str, Any] = {"host_link": link}
    if rtl or (board is not None and flow == "rtl"):
        sections["rtl"] = write_rtl(design, hls.root, link)
    if board is not None:
        sections.update(_write_board_files(design, hls.root, board, flow, sections.get("rtl", {}), link))
    design.write_manifest(hls.root, **sections)
    return hls


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def host_link(design: DeviceDesign, board: Board | None) -> dict[str, Any]:
    """The DMA buffers of the host link and how host_out is cut into packets (``amp_pack``): the
    driver allocates exactly these (host/pynq.py), the board wrapper is generated with them.

    A transfer is at most the DMA's length register (``2**bits - 1`` bytes, whole beats). The
    transmit buffer takes the largest message the host sends (a larger one goes in several
    transfers); the receive buffer two of the largest it receives, so that a packet closed at
    ``packet_close_beats`` still fits with one more message; a single message larger than the
    buffer is cut at ``packet_limit_beats`` (the only packets that end inside a message)."""
    bits = board.dma_length_width if board is not None else DEFAULT_LENGTH_BITS
    max_transfer = ((1 << bits) - 1) // BEAT_BYTES * BEAT_BYTES
    wires, shapes = design.wiring, design.placement.channel_map
    beats_in = [message_beats(Kind.CTRL, 1, 1)]
    for r in wires.demux_routes:
        kind = Kind[r["kind"].removeprefix("KIND_")]
        beats_in.append(message_beats(kind, r["max_rows"], shapes[r["channel"]].shapes[kind].width))
    beats_out = [message_beats(Kind.STATS, 1, STATS_WIDTH)]
    for r in wires.mux_routes:
        link = next(s for s in wires.streams if s.name == r["stream"])
        beats_out.append(link.max_message_beats)
    in_bytes, out_bytes = max(beats_in) * BEAT_BYTES, max(beats_out) * BEAT_BYTES
    tx = min(max_transfer, _round_up(max(BUFFER_MIN, in_bytes), BUFFER_ALIGN))
    rx = min(max_transfer, _round_up(max(BUFFER_MIN, 2 * out_bytes), BUFFER_ALIGN))
    limit = rx // BEAT_BYTES
    return {
        "dma_length_bits": bits,
        "max_transfer_bytes": max_transfer,
        "tx_buffer_bytes": tx,
        "rx_buffer_bytes": rx,
        "max_in_message_bytes": in_bytes,
        "max_out_message_bytes": out_bytes,
        "packet_limit_beats": limit,
        "packet_close_beats": max(1, limit - max(beats_out)),
        "packet_idle_cycles": PACK_IDLE_CYCLES,
    }


def _write_board_files(design: DeviceDesign, root: Path, board: Board, flow: str, rtl: dict[str, Any],
                       link: dict[str, Any]) -> dict[str, Any]:
    """The board files of ``flow`` (``FLOW_FILES``); the manifest's board sections."""
    name = design.graph.name
    tops = [dict(top=k.top, node=k.name, source=f"kernels/{k.top}.cpp") for k in design.nodes.values()]
    tops += [dict(top=t, node=None, source=BOUNDARY_SOURCE) for t in ("k_demux", "k_mux")]
    streams = [
        dict(name=s.name, src=s.src, dst=s.dst, kind=s.kind.name, beats=s.max_message_beats,
             depth=design.board_fifo_depths[s.name], aw=design.fifo_address_bits[s.name])
        for s in design.wiring.streams
    ]
    for t in tops:  # the tcl and the Makefile name these files: they must exist
        if not (root / t["source"]).is_file():
            raise AmpHlsError(f"generate_hls wrote no {t['source']}")
    board_sources = rtl.get("board_sources", [])
    for src in board_sources:
        if not (root / src).is_file():
            raise AmpHlsError(f"write_rtl wrote no {src}")
    for old in PROJECT_FILES:  # a previous generation's files of the other flow
        if old not in FLOW_FILES[flow] and (root / old).is_file():
            (root / old).unlink()
    ctx: dict[str, Any] = dict(
        graph_name=name,
        name=name,
        flow=flow,
        bd_name=BD_NAME,
        dma=DMA_CELL,
        device_cell=DEVICE_CELL,
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
        rtl_sources=board_sources,
        missing_kinds=rtl.get("missing_kinds", []),
        board_top=BOARD_TOP,
        link=link,
        options=design.options,
        kernels=list(design.nodes.values()),
    )
    env = environment()
    for filename in FLOW_FILES[flow]:
        (root / filename).write_text(env.get_template(f"project/{filename}.j2").render(**ctx))
    sections: dict[str, Any] = {
        "flow": flow,
        "board": board.to_json(),
        # what the driver needs of the bitstream: its files, and whether it has the control unit
        "bitstream": {"basename": name, "bit": f"{name}.bit", "hwh": f"{name}.hwh", "flow": flow,
                      "control": flow == "rtl"},
        "dma": DMA_CELL,  # the overlay attribute host.pynq drives
        "dma_length_bits": board.dma_length_width,  # its largest transfer: 2**bits - 1 bytes
        "streams": [
            {"name": s["name"], "from": str(s["src"]), "to": str(s["dst"]), "kind": s["kind"],
             "max_message_beats": s["beats"], "fifo_depth": s["depth"]}
            for s in streams
        ],
    }
    if flow == "hls":
        sections["ip"] = {**IP, "tops": [t["top"] for t in tops]}
    return sections


def write_rtl(design: DeviceDesign, root: Path, link: dict[str, Any] | None = None) -> dict[str, Any]:
    """``root/rtl/*.sv`` and ``root/board/`` (``amp_board``: amp_top with ``amp_pack``, sized by
    the host ``link``) and the manifest's ``rtl`` entry (top, sources in compile order, the board
    top and its sources relative to ``root``) when every device node kind has an RTL kernel;
    otherwise no RTL at all (a previous generation's included) and an entry naming the kinds
    that lack one."""
    rtl_dir, board_dir = root / RTL_DIR, root / BOARD_DIR
    for old in [*rtl_dir.glob("*.sv"), *board_dir.glob("*.v"), *board_dir.glob("*.sv")]:
        old.unlink()
    missing = missing_kinds(design)
    if missing:
        return {"missing_kinds": list(missing)}
    link = link if link is not None else host_link(design, None)
    sources = generate_top(design, rtl_dir)
    board_dir.mkdir(parents=True, exist_ok=True)
    (board_dir / PACK_FILE).write_text((hw_dir() / "rtl" / PACK_FILE).read_text())
    (board_dir / f"{BOARD_TOP}.v").write_text(environment().get_template("rtl/board.v.j2").render(
        module=BOARD_TOP, top=TOP, graph_name=design.graph.name, limit=link["packet_limit_beats"],
        close=link["packet_close_beats"], idle=link["packet_idle_cycles"]))
    return {
        "top": TOP,
        "sources": [p.name for p in sources],
        "board_top": BOARD_TOP,
        "board_sources": [f"{RTL_DIR}/{p.name}" for p in sources] + [f"{BOARD_DIR}/{PACK_FILE}", f"{BOARD_DIR}/{BOARD_TOP}.v"],
    }


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


def project_board_rtl(root: str | Path) -> tuple[list[Path], str]:
    """What the rtl flow's bitstream holds: ``amp_board`` (amp_top with amp_pack) and its sources
    in compile order; AmpHlsError when the project has none."""
    root = Path(root)
    project_rtl(root)  # the same errors for a project without RTL
    rtl = json.loads((root / "manifest.json").read_text())["rtl"]
    if not isinstance(rtl.get("board_top"), str) or not isinstance(rtl.get("board_sources"), list):
        raise AmpHlsError(f"{root}/manifest.json lists no board wrapper (rtl.board_top): regenerate the project")
    return [root / str(s) for s in rtl["board_sources"]], rtl["board_top"]


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
    graph = load(root / "graph.json")  # any defect an IRError naming the file
    try:
        options = DeviceOptions.from_json(manifest)
    except (KeyError, TypeError, AmpHlsError) as exc:
        raise AmpHlsError(f"{root}/manifest.json lacks valid HLS options: {exc}") from None
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
