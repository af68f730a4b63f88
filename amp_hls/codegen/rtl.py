"""IR -> RTL: the SystemVerilog package, kernel modules, the boundary, a simulation harness,
and the connected top ``amp_top`` (``generate_design``: boundary, kernels, one FIFO per stream).

Like the C++ headers (``codegen.headers``), nothing here is typed by hand: the package
``amp_pkg`` takes every wire constant from ``amp_hls.wire.wire_constants``, the precisions and
accumulator width from the numeric config, and the tanh/sigmoid tables from
``amp_hls.numerics.activation_table``. Kernel modules are named ``k_<node>`` with the ports of
the HLS kernel of the same node (``codegen.hls.kernel_ports``), as AXI streams with Vitis HLS
naming (``in0_TDATA``, ...; ``ap_clk``, ``ap_rst_n``), so one testbench drives either.
``k_demux``/``k_mux`` follow ``codegen.hls.wiring``'s routes, as the C++ boundary does.

The RTL keeps to a conservative Verilog-2005-like subset (a package, functions that assign their
name, tables as constant ROMs) meant for Yosys as well as Verilator; only Verilator checks it so
far (its default warnings are fatal in every build).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import AmpHlsError
from ..ir import GraphCore
from ..numerics import ACC_BITS, ACC_MAX, ACC_MIN, LUT_KINDS, NumericConfig, activation_table
from ..placement import place
from ..resources import hw_dir, templates_dir
from ..wire import (
    HEADER_FIELDS,
    STATE_WORD_BITS,
    STATE_WORDS,
    Kind,
    beats_per_row,
    elements_per_beat,
    wire_constants,
)
from .hls import HlsOptions, StreamLink, kernel_ports, port_reads, wiring
from .jinja import environment

PACKAGE_FILE = "amp_pkg.sv"
HARNESS = "amp_harness"
TOP = "amp_top"  # the connected design: boundary, kernels and one FIFO per stream
FIFO_FILE = "amp_fifo.sv"  # hand-written, in hw/rtl
BOUNDARY_FILE = "boundary.sv"
SMALL_FIFO = 16  # beats of a FIFO whose depth no progress depends on (see fifo_address_bits)
KERNEL_TEMPLATES = "rtl/kernels"  # one <kind>.sv.j2 per node kind with an RTL kernel


def rtl_kinds() -> tuple[str, ...]:
    """Node kinds that have an RTL kernel: those with a template in ``templates/rtl/kernels``."""
    return tuple(sorted(p.name.removesuffix(".sv.j2") for p in (templates_dir() / KERNEL_TEMPLATES).glob("*.sv.j2")))


def sv64(value: int) -> str:
    """A signed 64-bit SV literal; the sign sits outside, since ``64'sd`` takes no minus."""
    return f"-64'sd{-value}" if value < 0 else f"64'sd{value}"


def _bits(n: int) -> int:
    """Bits of a counter or index over ``range(n)`` (at least one)."""
    return max(1, (n - 1).bit_length())


def render_package(numerics: NumericConfig) -> str:
    return environment().get_template("rtl/amp_pkg.sv.j2").render(
        constants=wire_constants(),
        acc_bits=ACC_BITS,
        acc_min=ACC_MIN,
        acc_max=ACC_MAX,
        precisions={"DATA": numerics.data, "WEIGHTS": numerics.weights, "GRADS": numerics.grads},
        grad_acc_frac=numerics.grad_acc_frac,
        tables=[activation_table(kind, numerics.data) for kind in LUT_KINDS],
        sv64=sv64,
    )


def render_kernel(graph: GraphCore, name: str, options: HlsOptions | None = None) -> str:
    """The RTL module ``k_<name>`` of one node; AmpHlsError for a kind with no RTL kernel yet.

    Every template gets the same context (the node, its port specs, the options and the wire
    geometry of its first input); kind-specific sizes are computed in the template from these."""
    options = options or HlsOptions()
    node = graph.nodes[name]
    if node.kind not in rtl_kinds():
        raise AmpHlsError(f"no RTL kernel for node kind {node.kind!r} (node '{name}')")
    in_specs = [graph.input_spec(name, i) for i in range(node.n_inputs)]
    out_specs = [graph.spec(name, j) for j in range(node.n_outputs)]
    spec = in_specs[0]
    epb = elements_per_beat(Kind.DATA)
    bpr = beats_per_row(Kind.DATA, spec.width)
    rows_bits = next(f.bits for f in HEADER_FIELDS if f.name == "rows")
    return environment().get_template(f"{KERNEL_TEMPLATES}/{node.kind}.sv.j2").render(
        graph_name=graph.name,
        node=node,
        module=f"k_{name}",
        options=options,
        in_specs=in_specs,
        out_specs=out_specs,
        ports=kernel_ports(node),
        bits=_bits,
        beats_per_row=beats_per_row,
        Kind=Kind,
        slots=options.cache_slots,
        slot_bits=_bits(options.cache_slots),
        epb=epb,
        bpr=bpr,
        col_bits=_bits(bpr),
        beat_bits=_bits(spec.max_rows * bpr),
        max_beats=spec.max_rows * bpr,
        saved_depth=options.cache_slots << _bits(spec.max_rows * bpr),  # addressed {slot, beat}
        max_rows=spec.max_rows,
        rows_bits=rows_bits,
        last_lanes=spec.width - (bpr - 1) * epb,  # lanes of a row's last beat that hold data
        state_words=STATE_WORDS,
        state_word_bits=STATE_WORD_BITS,
    )


def render_boundary(graph: GraphCore) -> str:
    """``k_demux`` and ``k_mux`` for the device part of ``graph`` (routes from ``hls.wiring``)."""
    wires = wiring(graph, place(graph))
    routes = max(len(wires.demux_routes), len(wires.mux_routes))
    return environment().get_template("rtl/boundary.sv.j2").render(
        graph_name=graph.name,
        demux_routes=wires.demux_routes,
        mux_routes=wires.mux_routes,
        route_bits=_bits(routes),
    )


def render_harness(graph: GraphCore, nodes: list[str]) -> str:
    """A module holding the kernels of ``nodes`` and the boundary side by side, unconnected, their
    ports prefixed ``<node>_`` (``demux_``, ``mux_``): one simulator build then tests them all (a
    Verilator build costs seconds, a run far less)."""
    wires = wiring(graph, place(graph))

    def ports(names: list[str], reads: list[bool]) -> list[dict[str, object]]:
        return [{"name": p, "reads": r} for p, r in zip(names, reads)]

    kernels = [
        {"node": n, "module": f"k_{n}", "error": True,
         "ports": ports(kernel_ports(graph.nodes[n]), [port_reads(p) for p in kernel_ports(graph.nodes[n])])}
        for n in nodes
    ]
    demux = wires.demux_ports
    kernels.append({"node": "demux", "module": "k_demux", "error": True,
                    "ports": ports(demux, [True] + [False] * (len(demux) - 1))})
    mux = wires.mux_ports
    kernels.append({"node": "mux", "module": "k_mux", "error": False,
                    "ports": ports(mux, [True] * (len(mux) - 1) + [False])})
    return environment().get_template("rtl/harness.sv.j2").render(
        module=HARNESS, graph_name=graph.name, kernels=kernels
    )


@dataclass(frozen=True)
class RtlFiles:
    package: Path
    kernels: dict[str, Path]  # node -> its module's file
    boundary: Path
    harness: Path

    @property
    def sources(self) -> list[Path]:
        """In compile order: the package first."""
        return [self.package, *self.kernels.values(), self.boundary, self.harness]


def generate_rtl(
    graph: GraphCore, nodes: list[str], out_dir: str | Path, options: HlsOptions | None = None
) -> RtlFiles:
    """Write ``amp_pkg.sv``, ``k_<node>.sv`` for each of ``nodes``, ``boundary.sv`` and the
    simulation harness ``amp_harness.sv`` (all of them side by side) into ``out_dir``."""
    options = options or HlsOptions()
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    package = root / PACKAGE_FILE
    package.write_text(render_package(options.numerics))
    kernels = {}
    for name in nodes:
        path = root / f"k_{name}.sv"
        path.write_text(render_kernel(graph, name, options))
        kernels[name] = path
    boundary = root / BOUNDARY_FILE
    boundary.write_text(render_boundary(graph))
    harness = root / f"{HARNESS}.sv"
    harness.write_text(render_harness(graph, nodes))
    return RtlFiles(package, kernels, boundary, harness)


def missing_kinds(graph: GraphCore) -> tuple[str, ...]:
    """The kinds of ``graph``'s device nodes that have no RTL kernel yet (empty: ``amp_top``
    can be generated)."""
    kinds = {graph.nodes[n].kind for n in place(graph).device_nodes}
    return tuple(sorted(kinds - set(rtl_kinds())))


def fifo_address_bits(link: StreamLink, options: HlsOptions) -> int:
    """Address bits of ``link``'s FIFO (``2**bits`` beats).

    A DATA stream between kernels, or from the demux, holds ``cache_slots`` whole messages: as
    many as can be on it at once when ``cache_slots`` covers mak times the messages one instance
    leaves at a node (the sizing rule), so no writer ever waits for room -- the unbounded streams
    of the C simulation, and its freedom from deadlock, loops included. A stream into the mux
    drains whenever the host reads host_out, and a WEIGHTS stream's reader never waits for
    anything but room it always gets: progress does not depend on their depth, and
    ``SMALL_FIFO`` beats only decouple writer and reader (docs/architecture.md, RTL)."""
    if link.dst.top == "k_mux" or link.kind is not Kind.DATA:
        return _bits(SMALL_FIFO)
    return _bits(options.cache_slots * link.max_message_beats)


def render_top(graph: GraphCore, options: HlsOptions | None = None) -> str:
    """``amp_top``: ``k_demux``, ``k_mux`` and every device node's kernel, each stream of
    ``hls.wiring`` through its own ``amp_fifo``."""
    options = options or HlsOptions()
    placement = place(graph)
    wires = wiring(graph, placement)
    links = [
        dict(name=link.name, src=str(link.src), dst=str(link.dst), kind=link.kind.name,
             beats=link.max_message_beats, aw=fifo_address_bits(link, options))
        for link in wires.streams
    ]
    kernels = []
    for name in placement.device_nodes:
        ports = kernel_ports(graph.nodes[name])
        kernels.append(dict(node=name, module=f"k_{name}", ports=[
            dict(port=p, stream=s, side="r" if port_reads(p) else "w")
            for p, s in zip(ports, wires.kernel_streams[name], strict=True)
        ]))
    return environment().get_template("rtl/top.sv.j2").render(
        module=TOP,
        graph_name=graph.name,
        links=links,
        kernels=kernels,
        demux_streams=[r["stream"] for r in wires.demux_routes],
        mux_streams=[r["stream"] for r in wires.mux_routes],
        errors=["demux", *placement.device_nodes],
    )


def generate_design(graph: GraphCore, out_dir: str | Path, options: HlsOptions | None = None) -> list[Path]:
    """Write the whole device design of ``graph`` into ``out_dir``: ``amp_pkg.sv``, ``amp_fifo.sv``,
    ``k_<node>.sv`` per device node, ``boundary.sv`` and ``amp_top.sv``; the files in compile
    order. A device node kind with no RTL kernel is an AmpHlsError raised before anything is
    written."""
    options = options or HlsOptions()
    missing = missing_kinds(graph)
    if missing:
        raise AmpHlsError(f"graph {graph.name!r}: no RTL kernel for node kind(s) {', '.join(missing)}")
    placement = place(graph)
    texts = {PACKAGE_FILE: render_package(options.numerics),
             FIFO_FILE: (hw_dir() / "rtl" / FIFO_FILE).read_text()}
    for name in placement.device_nodes:
        texts[f"k_{name}.sv"] = render_kernel(graph, name, options)
    texts[BOUNDARY_FILE] = render_boundary(graph)
    texts[f"{TOP}.sv"] = render_top(graph, options)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for filename, text in texts.items():
        (root / filename).write_text(text)
        paths.append(root / filename)
    return paths
