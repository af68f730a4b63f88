"""A board project: the HLS C++ project plus Vitis HLS / Vivado tcl, a Makefile and a README.

``generate_project(graph, out_dir, board)`` writes everything ``generate_hls`` writes, then
``hls.tcl`` (every kernel top synthesised and exported as an IP core), ``vivado.tcl`` (PS, AXI DMA,
one IP per kernel, one AXI-stream FIFO per stream, bitstream, ``<name>.bit`` + ``<name>.hwh``),
``Makefile`` and ``README.md`` from ``templates/project/``, and ``rtl/`` (``amp_top`` and its
sources, ``codegen.rtl.generate_design``) when every device node kind has an RTL kernel.
The block design's streams come from ``hls.wiring`` -- the same description the C simulation
driver is generated from -- so the two cannot disagree. Every value that reaches tcl or make is
a validated identifier or a number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError
from ..ir import GraphCore, load
from ..numerics import NumericConfig
from ..placement import place
from .boards import Board, load_board
from .hls import HlsOptions, HlsProject, generate_hls, wiring
from .jinja import environment
from .rtl import TOP, generate_design, missing_kinds

# The IP cores hls.tcl exports and vivado.tcl instantiates: vendor:library:<top>:version.
IP = {"vendor": "amphls", "library": "hls", "version": "1.0", "solution": "sol"}
BD_NAME = "amp_bd"
DMA_CELL = "dma"  # the AXI DMA's block-design instance (vivado.tcl), an attribute of the overlay
FIFO_MIN, FIFO_MAX = 16, 4096  # axis_data_fifo depths: powers of two
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


def fifo_depth(beats: int) -> int:
    """A power of two holding one message of ``beats`` beats, within the FIFO IP's range."""
    depth = FIFO_MIN
    while depth < beats and depth < FIFO_MAX:
        depth *= 2
    return depth


def generate_project(
    graph: GraphCore, out_dir: str | Path, board: str | Board, options: HlsOptions | None = None
) -> BoardProject:
    """Write the HLS sources and the board project for ``graph`` into ``out_dir``."""
    board = load_board(board) if isinstance(board, str) else board  # fails before anything is written
    hls = generate_hls(graph, out_dir, options)
    wires = wiring(graph, hls.placement)
    name = graph.name
    tops = [dict(top=f"k_{n}", node=n, source=f"kernels/k_{n}.cpp") for n in hls.placement.device_nodes]
    tops += [dict(top=t, node=None, source=BOUNDARY_SOURCE) for t in ("k_demux", "k_mux")]
    streams = [
        dict(name=s.name, src=s.src, dst=s.dst, kind=s.kind.name, beats=s.max_message_beats,
             depth=fifo_depth(s.max_message_beats))
        for s in wires.streams
    ]
    for t in tops:  # the tcl and the Makefile name these files: they must exist
        if not (hls.root / t["source"]).is_file():
            raise AmpHlsError(f"generate_hls wrote no {t['source']}")
    ctx: dict[str, Any] = dict(
        graph_name=graph.name,
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
        fifo_min=FIFO_MIN,
        fifo_max=FIFO_MAX,
    )
    env = environment()
    for filename in PROJECT_FILES:
        text = env.get_template(f"project/{filename}.j2").render(**ctx)
        (hls.root / filename).write_text(text)

    manifest_path = hls.root / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["board"] = board.to_json()
    manifest["bitstream"] = {"basename": name, "bit": f"{name}.bit", "hwh": f"{name}.hwh"}
    manifest["dma"] = DMA_CELL  # the overlay attribute host.pynq drives
    manifest["dma_length_bits"] = board.dma_length_width  # its largest transfer: 2**bits - 1 bytes
    manifest["ip"] = {**IP, "tops": [t["top"] for t in tops]}
    manifest["streams"] = [
        {"name": s["name"], "from": str(s["src"]), "to": str(s["dst"]), "kind": s["kind"],
         "max_message_beats": s["beats"], "fifo_depth": s["depth"]}
        for s in streams
    ]
    manifest["rtl"] = write_rtl(graph, hls.root, hls.options)
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    return BoardProject(hls, board, name)


def write_rtl(graph: GraphCore, root: Path, options: HlsOptions) -> dict[str, Any]:
    """``root/rtl/*.sv`` and the manifest's ``rtl`` entry (top, sources in compile order) when
    every device node kind has an RTL kernel; otherwise no RTL at all (a previous generation's
    included) and an entry naming the kinds that lack one."""
    rtl_dir = root / RTL_DIR
    for old in rtl_dir.glob("*.sv"):
        old.unlink()
    missing = missing_kinds(graph)
    if missing:
        return {"missing_kinds": list(missing)}
    return {"top": TOP, "sources": [p.name for p in generate_design(graph, rtl_dir, options)]}


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


def open_project(root: str | Path) -> HlsProject:
    """The HLS project a previous ``generate_hls``/``generate_project`` wrote into ``root``."""
    root = Path(root)
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise AmpHlsError(f"{root} is not an amp-hls project (manifest.json: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != "amp-hls.manifest":
        raise AmpHlsError(f"{root}/manifest.json is not an amp-hls manifest")
    graph = load(root / "graph.json")
    placement = place(graph)
    try:
        options = HlsOptions(
            numerics=NumericConfig.from_json(manifest["numerics"]),
            muf=manifest["muf"],
            cache_slots=manifest["cache_slots"],
        )
    except (KeyError, TypeError) as exc:
        raise AmpHlsError(f"{root}/manifest.json lacks the HLS options: {exc}") from None
    files = [root / "kernels" / f"k_{n}.cpp" for n in placement.device_nodes]
    files.append(root / BOUNDARY_SOURCE)
    missing = [str(f) for f in [*files, root / "csim" / "amp_csim.cpp"] if not f.is_file()]
    if missing:
        raise AmpHlsError(f"the project in {root} lacks {', '.join(missing)}: regenerate it")
    return HlsProject(root, placement, options, tuple(files))
