"""IR -> HLS C++ project: one free-running streaming kernel per device node.

Layout of a generated project::

    include/   amp_wire.h, amp_numerics.h (generated from Python), amp_stream.h, amp_kernel.h
               (copied from hw/include), amp_kernels.h (declarations, generated)
    kernels/   k_<node>.cpp per device node, boundary.cpp (k_demux, k_mux)
    csim/      amp_csim.cpp: the C simulation driver (a shared library for the host)
    manifest.json

Every IR edge with a device end becomes a forward stream ``fwd_<i>`` and a backward stream
``bwd_<i>`` (``i`` = the edge's index in the graph); every device parameter node gets ``params_<n>``
(WEIGHTS in) and ``grads_<n>`` (GRADS out). Kernel ports are named after the node's ports:
``in0`` (forward in) / ``in0_grad`` (gradient out), ``out0`` (forward out) / ``out0_grad``
(gradient in), ``params`` / ``grads``.

``wiring()`` is the one description of those streams (which kernel port writes each, which reads
it): the C-sim driver and the board project's block design (``codegen.project``) both read it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError
from ..ir import GraphCore, Linear, Node
from ..numerics import NumericConfig
from ..placement import Placement, place
from ..resources import hw_dir
from ..wire import Kind, beats_per_row, message_beats
from .headers import render_numerics_header, render_wire_header
from .jinja import environment

MANIFEST_VERSION = 1
SUPPORT_HEADERS = ("amp_stream.h", "amp_kernel.h")


@dataclass(frozen=True)
class HlsOptions:
    numerics: NumericConfig = NumericConfig("fixed")
    muf: int = 1  # backward messages between GRADS dumps
    cache_slots: int = 64  # tag-table entries per caching node (>= mak x messages per instance)

    def __post_init__(self) -> None:
        if not self.numerics.fixed:
            raise AmpHlsError("hardware computes in fixed point: use NumericConfig('fixed')")
        for name in ("data", "weights", "grads"):
            if getattr(self.numerics, name).width > 16:
                raise AmpHlsError(f"{name} precision wider than the wire's 16-bit elements")
        if self.muf < 1 or self.cache_slots < 1:
            raise AmpHlsError("muf and cache_slots must be at least 1")


@dataclass(frozen=True)
class HlsProject:
    root: Path
    placement: Placement
    options: HlsOptions
    kernel_files: tuple[Path, ...]

    @property
    def include_dir(self) -> Path:
        return self.root / "include"

    @property
    def csim_sources(self) -> tuple[Path, ...]:
        return (*self.kernel_files, self.root / "csim" / "amp_csim.cpp")


def kernel_ports(node: Node) -> list[str]:
    ports = []
    for i in range(node.n_inputs):
        ports += [f"in{i}", f"in{i}_grad"]
    for j in range(node.n_outputs):
        ports += [f"out{j}", f"out{j}_grad"]
    if isinstance(node, Linear):
        ports += ["params", "grads"]
    return ports


def port_reads(port: str) -> bool:
    """Whether a kernel reads the stream on ``port``: forward inputs, incoming gradients, weights."""
    if port in ("params", "grads"):
        return port == "params"
    return port.startswith("in") != port.endswith("_grad")


@dataclass(frozen=True)
class StreamEnd:
    top: str  # kernel top function: k_<node>, k_demux or k_mux
    port: str  # its argument (= AXI-stream interface) name

    def __str__(self) -> str:
        return f"{self.top}.{self.port}"


@dataclass(frozen=True)
class StreamLink:
    """One stream between two kernels: exactly one writer and one reader."""

    name: str  # fwd_<i>, bwd_<i>, params_<node>, grads_<node>
    src: StreamEnd  # the kernel port that writes it
    dst: StreamEnd  # the kernel port that reads it
    kind: Kind  # what it carries (DATA, WEIGHTS, GRADS)
    width: int
    max_rows: int

    @property
    def max_message_beats(self) -> int:
        return message_beats(self.kind, self.max_rows, self.width)


@dataclass(frozen=True)
class Wiring:
    """Every stream of the device, the boundary routes, and the stream on each kernel port."""

    streams: tuple[StreamLink, ...]
    demux_routes: tuple[dict[str, Any], ...]  # host_in -> stream, by channel id
    mux_routes: tuple[dict[str, Any], ...]  # stream -> host_out, stamped with its channel id
    kernel_streams: dict[str, tuple[str, ...]]  # device node -> stream per ``kernel_ports`` entry

    @property
    def demux_ports(self) -> list[str]:
        return ["host_in"] + [r["stream"] for r in self.demux_routes]

    @property
    def mux_ports(self) -> list[str]:
        return [r["stream"] for r in self.mux_routes] + ["host_out"]


def wiring(graph: GraphCore, placement: Placement) -> Wiring:
    """The streams joining the kernels of ``placement`` (the boundary's demux/mux included)."""
    edge_index = {id(e): i for i, e in enumerate(graph.edges)}
    device = set(placement.device_nodes)
    shapes: dict[str, tuple[Kind, int, int]] = {}  # stream -> (kind, width, max_rows), in order
    for e in graph.edges:
        if e.src.node in device or e.dst.node in device:
            spec = graph.spec(e.src.node, e.src.index)
            for d in ("fwd", "bwd"):
                shapes[f"{d}_{edge_index[id(e)]}"] = (Kind.DATA, spec.width, spec.max_rows)
    demux_routes, mux_routes = [], []
    for ch in placement.channels:
        if ch.edge is not None:
            i = edge_index[id(ch.edge)]
            data = ch.spec.shape(Kind.DATA)
            sizes = dict(beats_per_row=beats_per_row(Kind.DATA, data.width), max_rows=data.max_rows)
            if placement.enters_device(ch.edge):  # forward in, gradient out
                demux_routes.append(dict(channel=ch.channel, name=ch.name, kind="KIND_DATA", direction="DIR_FWD", stream=f"fwd_{i}", **sizes))
                mux_routes.append(dict(channel=ch.channel, name=ch.name, stream=f"bwd_{i}"))
            else:  # forward out, gradient in
                mux_routes.append(dict(channel=ch.channel, name=ch.name, stream=f"fwd_{i}"))
                demux_routes.append(dict(channel=ch.channel, name=ch.name, kind="KIND_DATA", direction="DIR_BWD", stream=f"bwd_{i}", **sizes))
        else:
            shape = ch.spec.shape(Kind.WEIGHTS)
            shapes[f"params_{ch.node}"] = (Kind.WEIGHTS, shape.width, shape.max_rows)
            shapes[f"grads_{ch.node}"] = (Kind.GRADS, shape.width, shape.max_rows)
            sizes = dict(beats_per_row=beats_per_row(Kind.WEIGHTS, shape.width), max_rows=shape.max_rows)
            demux_routes.append(dict(channel=ch.channel, name=ch.name, kind="KIND_WEIGHTS", direction="DIR_FWD", stream=f"params_{ch.node}", **sizes))
            mux_routes.append(dict(channel=ch.channel, name=ch.name, stream=f"grads_{ch.node}"))

    writers: dict[str, list[StreamEnd]] = {s: [] for s in shapes}
    readers: dict[str, list[StreamEnd]] = {s: [] for s in shapes}
    kernel_streams = {}
    for name in placement.device_nodes:
        node = graph.nodes[name]
        kernel_streams[name] = tuple(_edge_streams(graph, node))
        for port, stream in zip(kernel_ports(node), kernel_streams[name], strict=True):
            (readers if port_reads(port) else writers)[stream].append(StreamEnd(f"k_{name}", port))
    for r in demux_routes:
        writers[r["stream"]].append(StreamEnd("k_demux", r["stream"]))
    for r in mux_routes:
        readers[r["stream"]].append(StreamEnd("k_mux", r["stream"]))
    links = []
    for s, (kind, width, max_rows) in shapes.items():
        if len(writers[s]) != 1 or len(readers[s]) != 1:  # a generator bug, never user input
            raise AmpHlsError(f"stream {s} has writers {writers[s]} and readers {readers[s]}")
        links.append(StreamLink(s, writers[s][0], readers[s][0], kind, width, max_rows))
    return Wiring(tuple(links), tuple(demux_routes), tuple(mux_routes), kernel_streams)


def _signature(ports: list[str]) -> str:
    return ", ".join(f"amp::Stream& {p}" for p in ports)


def _edge_streams(graph: GraphCore, node: Node) -> list[str]:
    """The driver's stream for each kernel port, in ``kernel_ports`` order."""
    index = {id(e): i for i, e in enumerate(graph.edges)}
    args = []
    for i in range(node.n_inputs):
        e = graph.edge_into(node.name, i)
        args += [f"fwd_{index[id(e)]}", f"bwd_{index[id(e)]}"]
    for j in range(node.n_outputs):
        e = graph.edge_from(node.name, j)
        args += [f"fwd_{index[id(e)]}", f"bwd_{index[id(e)]}"]
    if isinstance(node, Linear):
        args += [f"params_{node.name}", f"grads_{node.name}"]
    return args


def generate_hls(graph: GraphCore, out_dir: str | Path, options: HlsOptions | None = None) -> HlsProject:
    """Write the HLS C++ project for ``graph`` into ``out_dir`` (created; files overwritten)."""
    options = options or HlsOptions()
    placement = place(graph)
    if not placement.device_nodes:
        raise AmpHlsError(f"graph {graph.name!r} places no node on the device")
    root = Path(out_dir)
    for sub in ("include", "kernels", "csim"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = environment()

    (root / "include" / "amp_wire.h").write_text(render_wire_header())
    (root / "include" / "amp_numerics.h").write_text(render_numerics_header(options.numerics))
    for name in SUPPORT_HEADERS:
        shutil.copyfile(hw_dir() / "include" / name, root / "include" / name)

    wires = wiring(graph, placement)
    streams = [link.name for link in wires.streams]
    demux_routes, mux_routes = list(wires.demux_routes), list(wires.mux_routes)
    demux_ports, mux_ports = wires.demux_ports, wires.mux_ports
    common: dict[str, Any] = dict(
        graph_name=graph.name,
        demux_routes=demux_routes,
        mux_routes=mux_routes,
        demux_ports=demux_ports,
        mux_ports=mux_ports,
        demux_signature=_signature(demux_ports),
        mux_signature=_signature(mux_ports),
        demux_args=", ".join(demux_ports),
        mux_args=", ".join(mux_ports),
        options=options,
    )

    kernels, files = [], []
    for name in placement.device_nodes:
        node = graph.nodes[name]
        ports = kernel_ports(node)
        ctx = dict(
            common,
            node=node,
            fn=f"k_{name}",
            ns=f"n_{name}",
            ports=ports,
            signature=_signature(ports),
            in_specs=[graph.input_spec(name, i) for i in range(node.n_inputs)],
            out_specs=[graph.spec(name, j) for j in range(node.n_outputs)],
        )
        try:
            template = env.get_template(f"hls/kernels/{node.kind}.cpp.j2")
        except Exception as exc:  # jinja2.TemplateNotFound
            raise AmpHlsError(f"no HLS kernel for node kind {node.kind!r} (node '{name}')") from exc
        path = root / "kernels" / f"k_{name}.cpp"
        path.write_text(template.render(**ctx))
        files.append(path)
        kernels.append(dict(fn=f"k_{name}", signature=ctx["signature"], args=", ".join(wires.kernel_streams[name])))
    boundary = root / "kernels" / "boundary.cpp"
    boundary.write_text(env.get_template("hls/boundary.cpp.j2").render(**common))
    files.append(boundary)
    ctx = dict(common, kernels=kernels, streams=streams)
    (root / "include" / "amp_kernels.h").write_text(env.get_template("hls/amp_kernels.h.j2").render(**ctx))
    (root / "csim" / "amp_csim.cpp").write_text(env.get_template("hls/amp_csim.cpp.j2").render(**ctx))

    manifest = {
        "schema": "amp-hls.manifest",
        "version": MANIFEST_VERSION,
        "graph": graph.name,
        "numerics": options.numerics.to_json(),
        "muf": options.muf,
        "cache_slots": options.cache_slots,
        "kernels": [{"node": n, "kind": graph.nodes[n].kind, "top": f"k_{n}", "ports": kernel_ports(graph.nodes[n])} for n in placement.device_nodes],
        **placement.to_json(),
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (root / "graph.json").write_text(json.dumps(graph.to_json(), indent=2) + "\n")
    return HlsProject(root, placement, options, tuple(files))
