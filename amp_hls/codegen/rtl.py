"""The lowered device design -> RTL: the SystemVerilog package, kernel modules, the boundary, a
simulation harness, and the connected top ``amp_top`` (``generate_top``: boundary, kernels, one
FIFO per stream, each sized by ``DeviceDesign.fifo_address_bits``).

Like the C++ headers (``codegen.headers``), nothing here is typed by hand: the package
``amp_pkg`` takes every wire constant from ``amp_hls.wire.wire_constants``, the precisions and
accumulator width from the numeric config, and the tanh/sigmoid tables from
``amp_hls.numerics.activation_table``. Kernel modules are named ``k_<node>`` with the ports of
the HLS kernel of the same node (``design.kernel_ports``), as AXI streams with Vitis HLS
naming (``in0_TDATA``, ...; ``ap_clk``, ``ap_rst_n``), so one testbench drives either.
``k_demux``/``k_mux`` follow the design's routes, as the C++ boundary does.

The RTL keeps to a conservative Verilog-2005-like subset (a package, functions that assign their
name, tables as constant ROMs) meant for Yosys as well as Verilator; only Verilator checks it so
far (its default warnings are fatal in every build).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..control import SATURATION_BITS, control_constants
from ..design import (
    DeviceDesign,
    DeviceOptions,
    has_dump_engine,
    index_bits,
    linear_aligned,
    port_reads,
)
from ..errors import AmpHlsError
from ..ir import LIMITS, node_lanes
from ..kinds import KINDS
from ..memories import package_constants
from ..numerics import (
    ACC_BITS,
    ACC_MAX,
    ACC_MIN,
    LUT_KINDS,
    NumericConfig,
    activation_table,
    loss_tables,
)
from ..resources import hw_dir
from ..wire import (
    BEAT_BITS,
    ELEMENT_BITS,
    HEADER_FIELDS,
    STATE_WORD_BITS,
    STATE_WORDS,
    Kind,
    beats_per_row,
    elements_per_beat,
    parts_on_beats,
    wire_constants,
)
from .jinja import environment

PACKAGE_FILE = "amp_pkg.sv"
HARNESS = "amp_harness"
TOP = "amp_top"  # the connected design: boundary, kernels and one FIFO per stream
FIFO_FILE = "amp_fifo.sv"  # hand-written, in hw/rtl
# The hand-written parametric library (hw/rtl) every design is compiled with, in compile order:
# the stream FIFO, the one memory and the one tag table every kernel keeps its state in, the
# ROM the activation tables are read from, and the converters between streams of different lanes.
LIBRARY_FILES = (FIFO_FILE, "amp_ram.sv", "amp_tag_table.sv", "amp_rom.sv", "amp_lanes.sv")
BOUNDARY_FILE = "boundary.sv"
# Verilator calls a replication wider than 8,192 bits suspect; a Linear's widest word (its G
# accumulators, P x ACC_BITS: 12,288 bits at the largest parallelism) is zero-filled by one.
REPLICATION_LIMIT = max(8192, LIMITS.max_parallelism * ACC_BITS)
# Verilator unrolls a loop of up to 64 iterations by default. The tag table's per-slot column
# write (amp_tag_table.sv: SLOTS bit writes into each of its chunks' arrays) then becomes one
# delayed assignment per slot and chunk: at 64 slots, mlp's design verilated to 75k lines of C++
# that took 75 s to compile; kept as loops, 13k lines and 9 s, and it simulates faster (1.2e5 ->
# 1.9e5 cycles a CPU second). Of 1, 4, 8, 16 and 32, 8 was fastest there (within the noise).
UNROLL_COUNT = 8
# Every Verilator build of generated RTL passes these (sim.runner's and host.rtlsim's).
DESIGN_VERILATOR_FLAGS = ("--replication-limit", str(REPLICATION_LIMIT), "--unroll-count", str(UNROLL_COUNT))


def rtl_kinds() -> tuple[str, ...]:
    """Node kinds that have an RTL kernel (their row in ``amp_hls.kinds`` names a template)."""
    return tuple(sorted(kind for kind, row in KINDS.items() if row.rtl_template is not None))


def sv64(value: int) -> str:
    """A signed 64-bit SV literal; the sign sits outside, since ``64'sd`` takes no minus."""
    return f"-64'sd{-value}" if value < 0 else f"64'sd{value}"


def render_package(numerics: NumericConfig, use_uram: bool = False, lutram_depth: int = 0) -> str:
    """``amp_pkg``: the wire constants, the numerics and where memories go (``use_uram`` and
    ``lutram_depth``: the design's ``DeviceOptions``, amp_hls.memories)."""
    return environment().get_template("rtl/amp_pkg.sv.j2").render(
        constants=wire_constants(),
        memory_constants=package_constants(use_uram, lutram_depth),
        acc_bits=ACC_BITS,
        acc_min=ACC_MIN,
        acc_max=ACC_MAX,
        precisions={"DATA": numerics.data, "WEIGHTS": numerics.weights, "GRADS": numerics.grads},
        grad_acc_frac=numerics.grad_acc_frac,
        tables=[activation_table(kind, numerics.data) for kind in LUT_KINDS],
        sv64=sv64,
    )


def options_package(options: DeviceOptions) -> str:
    """``render_package`` for a design's options."""
    return render_package(options.numerics, options.use_uram, options.lutram_depth)


def render_kernel(design: DeviceDesign, name: str) -> str:
    """The RTL module ``k_<name>`` of one device node; AmpHlsError for a kind with no RTL kernel.

    Every template gets the same context (the node, its port specs, the options and the wire
    geometry of its first input); kind-specific sizes are computed in the template from these."""
    options = design.options
    kernel = design.nodes.get(name)  # None for a host node
    if kernel is None or kernel.node.kind not in rtl_kinds():
        raise AmpHlsError(f"no RTL kernel for node kind {design.graph.nodes[name].kind!r} (node '{name}')")
    node = kernel.node
    lanes = node_lanes(node)
    if lanes > 1 and not kernel.row.rtl_lanes:
        raise AmpHlsError(f"node '{name}': the RTL kernel of kind {node.kind!r} takes 1 lane so far, not {lanes}; "
                          f"lanes are built for {', '.join(k for k, r in KINDS.items() if r.rtl_lanes)}")
    in_specs, out_specs = list(kernel.in_specs), list(kernel.out_specs)
    spec = in_specs[0]
    epb = elements_per_beat(Kind.DATA) * lanes  # a beat of the kernel's streams: ``lanes`` 64-bit ones side by side
    bpr = beats_per_row(Kind.DATA, spec.width, lanes)
    rows_bits = next(f.bits for f in HEADER_FIELDS if f.name == "rows")
    return environment().get_template(kernel.row.rtl_template).render(
        graph_name=design.graph.name,
        node=node,
        module=kernel.top,
        options=options,
        in_specs=in_specs,
        out_specs=out_specs,
        ports=list(kernel.ports),
        bits=index_bits,
        beats_per_row=lambda kind, width: beats_per_row(kind, width, lanes),  # on the kernel's streams
        parts_on_beats=parts_on_beats([s.width for s in in_specs], lanes),  # concat: output beats are part beats
        Kind=Kind,
        slots=options.cache_slots,
        slot_bits=index_bits(options.cache_slots),
        epb=epb,
        lanes=lanes,
        bw=BEAT_BITS * lanes,  # TDATA bits of every port (the header and state beats in the low 64)
        wide=lambda expr: expr if lanes == 1 else f"{{{BEAT_BITS * (lanes - 1)}'d0, {expr}}}",  # a 64-bit value as a beat
        element_bits=ELEMENT_BITS[Kind.DATA],  # a DATA lane's width, for templates that place lanes by bit
        bpr=bpr,
        col_bits=index_bits(bpr),
        beat_bits=index_bits(spec.max_rows * bpr),
        max_beats=spec.max_rows * bpr,
        max_rows=spec.max_rows,
        rows_bits=rows_bits,
        last_lanes=spec.width - (bpr - 1) * epb,  # lanes of a row's last beat that hold data
        state_words=STATE_WORDS,
        state_word_bits=STATE_WORD_BITS,
        skip_dx=kernel.skip_dx,  # a Linear fed by a host source sends no in0_grad (design.skips_dx)
        dump_engine=has_dump_engine(getattr(node, "parallelism", 1), options),  # a Linear's dump buffer
        aligned=node.kind == "linear" and linear_aligned(node.in_features, node.parallelism),  # type: ignore[attr-defined]
        loss_tables=loss_tables(options.numerics.data),  # a Loss kernel's exp/log tables
    )


def render_boundary(design: DeviceDesign) -> str:
    """``k_demux`` and ``k_mux`` of ``design`` (its boundary routes)."""
    wires = design.wiring
    routes = max(len(wires.demux_routes), len(wires.mux_routes))
    return environment().get_template("rtl/boundary.sv.j2").render(
        graph_name=design.graph.name,
        demux_routes=wires.demux_routes,
        mux_routes=wires.mux_routes,
        route_bits=index_bits(routes),
        control=control_constants(),  # amp_control, the control unit (amp_hls.control)
        kernels=len(design.device_nodes),
    )


_SAT_PORT = re.compile(r"^\s*output\s+(?:wire|reg)\s+\[\s*(\d+)\s*:\s*0\s*\]\s+amp_sat\b", re.M)


def counts_saturations(kernel_text: str) -> bool:
    """Whether a rendered kernel module has the saturation counter port ``amp_sat``
    (``SATURATION_BITS`` wide) that amp_top sums for the control channel's STATS."""
    found = _SAT_PORT.search(kernel_text)
    if found and int(found.group(1)) + 1 != SATURATION_BITS:
        raise AmpHlsError(f"amp_sat is {int(found.group(1)) + 1} bits wide, not {SATURATION_BITS}")
    return found is not None


def render_harness(design: DeviceDesign, nodes: list[str], kernel_texts: dict[str, str] | None = None) -> str:
    """A module holding the kernels of ``nodes`` and the boundary side by side, unconnected, their
    ports prefixed ``<node>_`` (``demux_``, ``mux_``): one simulator build then tests them all (a
    Verilator build costs seconds, a run far less)."""
    wires = design.wiring

    def ports(names: list[str], reads: list[bool]) -> list[dict[str, object]]:
        return [{"name": p, "reads": r} for p, r in zip(names, reads)]

    kernels = [
        {"node": n, "module": design.nodes[n].top, "error": True, "bits": BEAT_BITS * node_lanes(design.nodes[n].node),
         "sat": counts_saturations(kernel_texts[n] if kernel_texts else render_kernel(design, n)),
         "ports": ports(list(design.nodes[n].ports), [port_reads(p) for p in design.nodes[n].ports])}
        for n in nodes
    ]
    demux = wires.demux_ports
    kernels.append({"node": "demux", "module": "k_demux", "error": True, "sat": False, "bits": BEAT_BITS,
                    "ports": ports(demux, [True] + [False] * (len(demux) - 1))})
    mux = wires.mux_ports
    kernels.append({"node": "mux", "module": "k_mux", "error": False, "sat": False, "bits": BEAT_BITS,
                    "ports": ports(mux, [True] * (len(mux) - 1) + [False])})
    return environment().get_template("rtl/harness.sv.j2").render(
        module=HARNESS, graph_name=design.graph.name, kernels=kernels
    )


@dataclass(frozen=True)
class RtlFiles:
    package: Path
    kernels: dict[str, Path]  # node -> its module's file
    boundary: Path
    harness: Path

    library: tuple[Path, ...]  # the hw/rtl modules the kernels instantiate

    @property
    def sources(self) -> list[Path]:
        """In compile order: the package first, then the library."""
        return [self.package, *self.library, *self.kernels.values(), self.boundary, self.harness]


def generate_rtl(design: DeviceDesign, nodes: list[str], out_dir: str | Path) -> RtlFiles:
    """Write ``amp_pkg.sv``, ``k_<node>.sv`` for each of ``nodes``, ``boundary.sv`` and the
    simulation harness ``amp_harness.sv`` (all of them side by side) into ``out_dir``."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    package = root / PACKAGE_FILE
    package.write_text(options_package(design.options))
    library = tuple(_copy_library(root))
    kernels, texts = {}, {}
    for name in nodes:
        path = root / f"k_{name}.sv"
        texts[name] = render_kernel(design, name)
        path.write_text(texts[name])
        kernels[name] = path
    boundary = root / BOUNDARY_FILE
    boundary.write_text(render_boundary(design))
    harness = root / f"{HARNESS}.sv"
    harness.write_text(render_harness(design, nodes, texts))
    return RtlFiles(package, kernels, boundary, harness, library)


def _copy_library(root: Path) -> list[Path]:
    """The library modules (LIBRARY_FILES) copied into ``root``, in compile order."""
    paths = []
    for name in LIBRARY_FILES:
        (root / name).write_text((hw_dir() / "rtl" / name).read_text())
        paths.append(root / name)
    return paths


def missing_kinds(design: DeviceDesign) -> tuple[str, ...]:
    """The kinds of the design's nodes that have no RTL kernel (empty: ``amp_top`` can be
    generated)."""
    kinds = {k.node.kind for k in design.nodes.values()}
    return tuple(sorted(kinds - set(rtl_kinds())))


def render_top(design: DeviceDesign, kernel_texts: dict[str, str] | None = None) -> str:
    """``amp_top``: ``k_demux``, ``k_mux`` and every device node's kernel, each stream of the
    design through its own ``amp_fifo``, and the control unit ``amp_control``
    (``kernel_texts``: the rendered kernels, node -> text, when the caller has them)."""
    wires = design.wiring
    if kernel_texts is None:
        kernel_texts = {name: render_kernel(design, name) for name in design.device_nodes}
    links = [
        dict(name=link.name, src=str(link.src), dst=str(link.dst), kind=link.kind.name,
             beats=link.max_written_beats, aw=design.fifo_address_bits[link.name],
             src_lanes=link.src_lanes, dst_lanes=link.dst_lanes, converters=link.converters,
             bpr=beats_per_row(link.kind, link.width))
        for link in wires.streams
    ]
    kernels = []
    for kernel in design.nodes.values():
        kernels.append(dict(node=kernel.name, module=kernel.top, sat=counts_saturations(kernel_texts[kernel.name]), ports=[
            dict(port=p, stream=s, side="r" if port_reads(p) else "w")
            for p, s in zip(kernel.ports, kernel.streams, strict=True)
        ]))
    return environment().get_template("rtl/top.sv.j2").render(
        module=TOP,
        graph_name=design.graph.name,
        links=links,
        kernels=kernels,
        demux_streams=[r["stream"] for r in wires.demux_routes],
        mux_streams=[r["stream"] for r in wires.mux_routes],
        errors=["demux", *design.device_nodes],
        control=control_constants(),
        beat_bits=BEAT_BITS,
    )


def generate_top(design: DeviceDesign, out_dir: str | Path) -> list[Path]:
    """Write the whole RTL of ``design`` into ``out_dir``: ``amp_pkg.sv``, ``amp_fifo.sv``,
    ``k_<node>.sv`` per device node, ``boundary.sv`` and ``amp_top.sv``; the files in compile
    order. A device node kind with no RTL kernel is an AmpHlsError raised before anything is
    written."""
    missing = missing_kinds(design)
    if missing:
        raise AmpHlsError(f"graph {design.graph.name!r}: no RTL kernel for node kind(s) {', '.join(missing)}")
    texts = {PACKAGE_FILE: options_package(design.options)}
    texts.update({name: (hw_dir() / "rtl" / name).read_text() for name in LIBRARY_FILES})
    for name in design.device_nodes:
        texts[f"k_{name}.sv"] = render_kernel(design, name)
    texts[BOUNDARY_FILE] = render_boundary(design)
    texts[f"{TOP}.sv"] = render_top(design, {name: texts[f"k_{name}.sv"] for name in design.device_nodes})
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for filename, text in texts.items():
        (root / filename).write_text(text)
        paths.append(root / filename)
    return paths
