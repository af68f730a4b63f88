"""The lowered device design: everything the hardware executors agree on, computed once.

``build_design(graph, options)`` places the graph, numbers the boundary channels, names every
stream between kernels (with its one writer and one reader), gives each kernel port its stream,
and sizes the FIFOs and tag caches. The HLS and RTL generators render it, the board project,
testbench writer, rtlsim, report and estimate read it, and ``DeviceDesign.manifest`` is the one
description of it that ``manifest.json`` carries. Nothing downstream calls ``place`` or derives
wiring on its own, so no two of them can disagree.

Stream names: every IR edge with a device end becomes a forward stream ``fwd_<i>`` and a backward
stream ``bwd_<i>`` (``i`` = the edge's index in the graph); every device node with parameters gets
``params_<n>`` (WEIGHTS in) and ``grads_<n>`` (GRADS out); every device Loss node gets ``loss_<n>``
(LOSS out, to the host). Kernel ports are named after the node's ports: ``in0`` (forward in) /
``in0_grad`` (gradient out), ``out0`` (forward out) / ``out0_grad`` (gradient in), ``params`` /
``grads``, ``loss``; the boundary kernels are ``k_demux`` and ``k_mux``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from .control import CONTROL_CHANNEL, CONTROL_NAME, MAX_KERNELS, STATS_FIELDS
from .errors import AmpHlsError
from .ir import LIMITS, EdgeSpec, GraphCore, Loss, Node, node_lanes
from .kinds import KindRow, kind_row
from .memories import check_lutram_depth
from .numerics import NumericConfig
from .placement import Placement, place
from .wire import Kind, beats_per_row, elements_per_beat, message_beats

MANIFEST_SCHEMA = "amp-hls.manifest"
MANIFEST_VERSION = 1
SMALL_FIFO = 16  # beats of an RTL FIFO whose depth no progress depends on (see deep_streams)
# The kinds whose RTL kernel writes several output streams beat by beat together: a join's backward
# sends each gradient beat to every input at once (templates/rtl/kernels/add.sv.j2's g_valid, which
# mul and concat extend). Every other kernel has one message on its way out at a time (one output
# register, or the last beat of one left in its register while the next starts). deep_streams'
# argument depends on this list: a kernel that comes to write outputs together belongs in it.
LOCKSTEP_GRADIENT_KINDS = frozenset({"add", "mul", "concat"})
# The depths Xilinx's axis_data_fifo takes (powers of two, PG085): the hls flow's block design
# puts one on every stream, as deep as the RTL's amp_fifo (board_fifo_depths).
BOARD_FIFO_MIN, BOARD_FIFO_MAX = 16, 32768


class HasResources(Protocol):
    """What ``DeviceOptions.on_board`` reads of a board (``codegen.boards.Board``, which this
    layer does not import): its resource counts."""

    @property
    def resources(self) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class DeviceOptions:
    """What a generated device fixes besides the graph: numerics, dump period, tag-cache size."""

    numerics: NumericConfig = NumericConfig("fixed")
    muf: int = 1  # backward messages between GRADS dumps
    cache_slots: int = 64  # tag-table entries per caching node (>= mak x messages per instance)
    # the most instances in flight the design is sized for (cache_slots covers max_in_flight x
    # the messages one instance leaves at a node); None: not fixed when it was generated
    max_in_flight: int | None = None
    # memories that fill UltraRAM well go there (amp_hls.memories): set for a board with URAM
    # (``on_board``), never by hand
    use_uram: bool = False
    # amp_ram memories of at most this many words (0: none) go to LUT-RAM instead of the block RAM
    # they would fill a quarter (amp_hls.memories): the folding sets it when block RAM bounds it
    lutram_depth: int = 0
    # each Linear copies G into a dump buffer (a word a cycle) that streams out beside its MACs,
    # instead of stalling while the dump streams out: one more G-sized memory per Linear
    dump_engine: bool = False

    def __post_init__(self) -> None:
        if not self.numerics.fixed:
            raise AmpHlsError("hardware computes in fixed point: use NumericConfig('fixed')")
        for name in ("data", "weights", "grads"):
            if getattr(self.numerics, name).width > 16:
                raise AmpHlsError(f"{name} precision wider than the wire's 16-bit elements")
        for name, most in (("muf", LIMITS.max_muf), ("cache_slots", LIMITS.max_cache_slots)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
                raise AmpHlsError(f"{name} must be an integer in [1, {most}], got {value!r}")
        check_lutram_depth(self.lutram_depth)
        if self.max_in_flight is not None and not 1 <= self.max_in_flight <= self.cache_slots:
            raise AmpHlsError(f"max_in_flight {self.max_in_flight} outside [1, cache_slots = {self.cache_slots}]")

    def to_json(self) -> dict[str, Any]:
        return {"numerics": self.numerics.to_json(), "muf": self.muf, "cache_slots": self.cache_slots,
                "max_in_flight": self.max_in_flight, "use_uram": self.use_uram, "lutram_depth": self.lutram_depth,
                "dump_engine": self.dump_engine}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DeviceOptions:
        return cls(numerics=NumericConfig.from_json(doc["numerics"]), muf=doc["muf"], cache_slots=doc["cache_slots"],
                   max_in_flight=doc.get("max_in_flight"), use_uram=bool(doc.get("use_uram", False)),
                   lutram_depth=doc.get("lutram_depth", 0), dump_engine=bool(doc.get("dump_engine", False)))

    def on_board(self, board: HasResources) -> DeviceOptions:
        """These options for ``board``: URAM used where it has some."""
        return replace(self, use_uram=board.resources.get("uram", 0) > 0)


def kernel_ports(node: Node) -> list[str]:
    """A kernel's stream ports, in argument order: per input, per output, then the parameters
    (or a Loss node's ``loss``, its LOSS reports to the host)."""
    ports = []
    for i in range(node.n_inputs):
        ports += [f"in{i}", f"in{i}_grad"]
    for j in range(node.n_outputs):
        ports += [f"out{j}", f"out{j}_grad"]
    if node.param_shapes():
        ports += ["params", "grads"]
    if isinstance(node, Loss):
        ports.append("loss")
    return ports


def port_reads(port: str) -> bool:
    """Whether a kernel reads the stream on ``port``: forward inputs, incoming gradients, weights."""
    if port in ("params", "grads", "loss"):
        return port == "params"
    return port.startswith("in") != port.endswith("_grad")


def skips_dx(graph: GraphCore, name: str) -> bool:
    """Whether device node ``name`` leaves out its input gradient: a Linear fed by the host where
    that gradient changes nothing (``gradient_unused``: a host source, or host nodes without
    parameters that only sources feed, such as tree-rnn's leaf routers), whose backward only
    completes the message, or a Loss fed its prediction on the device and its target from the
    host where that holds too (the target's zero gradient). Such a kernel runs no dx loop and
    sends nothing on ``in0_grad`` (a Loss: ``in1_grad``, so the device sends only its LOSS
    reports for an instance); the host answers the edge itself with a zero gradient
    (``host/runner.py``), so every edge still sees one backward per forward (contracts.md)."""
    node = graph.nodes[name]
    if node.kind == "loss":  # a device loss's target from the host, unused there: its zero gradient (in1)
        pred, target = graph.edge_into(name, 0), graph.edge_into(name, 1)
        return (pred is not None and target is not None and graph.nodes[pred.src.node].placement == "device"
                and gradient_unused(graph, target.src.node))
    if node.kind != "linear":
        return False
    edge = graph.edge_into(name, 0)
    return edge is not None and gradient_unused(graph, edge.src.node)


def gradient_unused(graph: GraphCore, name: str) -> bool:
    """Whether a gradient sent back into node ``name``'s outputs changes nothing but the message's
    completion: ``name`` and every node upstream of it (through inputs, loops included) run on
    the host and hold no parameters, so a gradient they pass back reaches only sources, which
    drop it. A zero gradient then trains the model exactly as the real one would."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        node = graph.nodes[current]
        if node.placement != "host" or node.param_shapes():
            return False
        todo += [e.src.node for i in range(node.n_inputs) if (e := graph.edge_into(current, i)) is not None]
    return True


def has_dump_engine(parallelism: int, options: DeviceOptions) -> bool:
    """Whether a Linear of this parallelism gets the dump engine: asked for (``dump_engine``) and
    P > 1, since its copy of G takes a word of P sums a cycle; at P = 1 it would take as many
    cycles as the dump streams out, so that kernel dumps inline and spends no dump buffer."""
    return options.dump_engine and parallelism > 1


def linear_aligned(in_features: int, parallelism: int) -> bool:
    """Whether a Linear's words take the beats of a row whole: P a multiple of a DATA beat's
    elements, or one word a row. Then every beat lands on a whole group of a word and an emitted
    word leaves nothing behind, so the RTL's packer and unpacker place a beat by its group index
    instead of shifting it by any number of elements (at P = 16, 1,575 fewer LUTs: a fifth of the
    kernel); the folding tries only such parallelisms above a beat (cycles.folding.candidates)."""
    return parallelism % elements_per_beat(Kind.DATA) == 0 or parallelism >= in_features


def dx_skipped(placement: Placement) -> frozenset[str]:
    """The device nodes that skip their dx (``skips_dx``)."""
    return frozenset(n for n in placement.device_nodes if skips_dx(placement.graph, n))


BOUNDARY_TOPS = ("k_demux", "k_mux")  # the boundary's modules, at the host end of their streams


@dataclass(frozen=True)
class StreamEnd:
    top: str  # kernel top function / module: k_<node>, k_demux or k_mux
    port: str  # its argument (= AXI-stream interface) name

    def __str__(self) -> str:
        return f"{self.top}.{self.port}"

    @property
    def node(self) -> str | None:
        """The device node whose kernel this is; None at the boundary (``k_demux``, ``k_mux``)."""
        return None if self.top in BOUNDARY_TOPS else self.top.removeprefix("k_")


@dataclass(frozen=True)
class StreamLink:
    """One stream between two kernels: exactly one writer and one reader."""

    name: str  # fwd_<i>, bwd_<i>, params_<node>, grads_<node>, loss_<node>
    src: StreamEnd  # the kernel port that writes it
    dst: StreamEnd  # the kernel port that reads it
    kind: Kind  # what it carries (DATA, WEIGHTS, GRADS, LOSS)
    width: int
    max_rows: int
    deep: bool = False  # its FIFO holds every message that can be on it at once (deep_streams)
    dump_beats: int = 0  # a Linear's gradient input: the GRADS beats it stalls for, dumping inline
    src_lanes: int = 1  # 64-bit beats a cycle at the writer (its node's ``lanes``; wire.py, Lanes)
    dst_lanes: int = 1  # and at the reader: where they differ the RTL converts between them

    @property
    def max_message_beats(self) -> int:
        """The longest message, in 64-bit beats."""
        return message_beats(self.kind, self.max_rows, self.width)

    @property
    def converters(self) -> list[tuple[str, int]]:
        """The converters amp_top puts on it (templates/rtl/top.sv.j2), as (part, lanes): an
        amp_narrow after a wide writer, an amp_widen before a wide reader, none where they agree."""
        if self.src_lanes == self.dst_lanes:
            return []
        return [*([("narrow", self.src_lanes)] if self.src_lanes > 1 else []),
                *([("widen", self.dst_lanes)] if self.dst_lanes > 1 else [])]

    @property
    def max_written_beats(self) -> int:
        """The longest message in the writer's beats (``src_lanes`` wide): what the RTL FIFO holds."""
        return message_beats(self.kind, self.max_rows, self.width, self.src_lanes)


@dataclass(frozen=True)
class Wiring:
    """Every stream of the device, the boundary routes, and the stream on each kernel port."""

    streams: tuple[StreamLink, ...]
    demux_routes: tuple[dict[str, Any], ...]  # host_in -> stream, by channel id
    mux_routes: tuple[dict[str, Any], ...]  # stream -> host_out, stamped with its channel id
    kernel_streams: dict[str, tuple[str, ...]]  # device node -> stream per ``kernel_ports`` entry

    @cached_property
    def links(self) -> dict[str, StreamLink]:
        """Each stream by name."""
        return {link.name: link for link in self.streams}

    @property
    def demux_ports(self) -> list[str]:
        return ["host_in"] + [r["stream"] for r in self.demux_routes]

    @property
    def mux_ports(self) -> list[str]:
        return [r["stream"] for r in self.mux_routes] + ["host_out"]


@dataclass(frozen=True)
class NodeDesign:
    """One device kernel: its node, its kind's row, its ports and the stream on each."""

    node: Node
    row: KindRow
    ports: tuple[str, ...]
    streams: tuple[str, ...]  # one per port
    in_specs: tuple[EdgeSpec, ...]
    out_specs: tuple[EdgeSpec, ...]
    skip_dx: bool = False  # a Linear whose dx nothing consumes: it sends no in0_grad (skips_dx)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def top(self) -> str:
        return f"k_{self.node.name}"


@dataclass(frozen=True)
class DeviceDesign:
    """The device part of one graph, lowered once (``build_design``)."""

    graph: GraphCore
    placement: Placement
    options: DeviceOptions
    wiring: Wiring
    nodes: dict[str, NodeDesign]  # device node -> its kernel, in placement order
    fifo_address_bits: dict[str, int]  # stream -> address bits of its RTL amp_fifo
    board_fifo_depths: dict[str, int]  # stream -> depth of the board's axis_data_fifo
    folding: dict[str, Any] | None = None  # how generate folded it (cycles/folding.py), for the manifest

    @property
    def device_nodes(self) -> tuple[str, ...]:
        return self.placement.device_nodes

    def manifest(self, **sections: Any) -> dict[str, Any]:
        """``manifest.json``: the design, plus what the caller adds (board, bitstream, rtl, ...)."""
        return {
            "schema": MANIFEST_SCHEMA,
            "version": MANIFEST_VERSION,
            "graph": self.graph.name,
            **self.options.to_json(),
            "kernels": [{"node": n.name, "kind": n.node.kind, "top": n.top, "ports": list(n.ports)}
                        for n in self.nodes.values()],
            "parallelism": {n.name: n.node.parallelism for n in self.nodes.values()
                            if hasattr(n.node, "parallelism")},
            "lanes": {n.name: node_lanes(n.node) for n in self.nodes.values() if node_lanes(n.node) > 1},
            "skip_dx": [n.name for n in self.nodes.values() if n.skip_dx],
            **self.placement.to_json(),
            "control": {"channel": CONTROL_CHANNEL, "name": CONTROL_NAME, "stats_fields": list(STATS_FIELDS),
                        "kernel_bits": list(self.device_nodes)},
            "fifo_depths": {name: 2 ** bits for name, bits in self.fifo_address_bits.items()},
            **({"folding": self.folding} if self.folding is not None else {}),
            **sections,
        }

    def write_manifest(self, root: str | Path, **sections: Any) -> Path:
        """Write ``root/manifest.json`` (the one place it is written) and ``root/graph.json``."""
        root = Path(root)
        (root / "graph.json").write_text(json.dumps(self.graph.to_json(), indent=2) + "\n")
        path = root / "manifest.json"
        path.write_text(json.dumps(self.manifest(**sections), indent=2) + "\n")
        return path


def build_design(graph: GraphCore, options: DeviceOptions | None = None) -> DeviceDesign:
    """Lower ``graph``'s device part; AmpHlsError when it places no node on the device."""
    options = options or DeviceOptions()
    placement = place(graph)
    if not placement.device_nodes:
        raise AmpHlsError(f"graph {graph.name!r} places no node on the device")
    if any(c.channel == CONTROL_CHANNEL for c in placement.channels):
        raise AmpHlsError(f"graph {graph.name!r} needs {len(placement.channels)} boundary channels; channel "
                          f"{CONTROL_CHANNEL} is the device's control channel: split the graph")
    if len(placement.device_nodes) > MAX_KERNELS:
        raise AmpHlsError(f"graph {graph.name!r} places {len(placement.device_nodes)} nodes on the device; "
                          f"the control channel's error flags cover {MAX_KERNELS}")
    wires = _wiring(graph, placement)
    bits = {link.name: fifo_address_bits(link, options) for link in wires.streams}
    nodes = {}
    for name in placement.device_nodes:
        node = graph.nodes[name]
        nodes[name] = NodeDesign(
            node=node,
            row=kind_row(node.kind),
            ports=tuple(kernel_ports(node)),
            streams=wires.kernel_streams[name],
            in_specs=tuple(graph.input_spec(name, i) for i in range(node.n_inputs)),
            out_specs=tuple(graph.spec(name, j) for j in range(node.n_outputs)),
            skip_dx=skips_dx(graph, name),
        )
    return DeviceDesign(
        graph=graph,
        placement=placement,
        options=options,
        wiring=wires,
        nodes=nodes,
        fifo_address_bits=bits,
        board_fifo_depths={name: board_fifo_depth(b) for name, b in bits.items()},
    )


def index_bits(n: int) -> int:
    """Bits of a counter or index over ``range(n)`` (at least one)."""
    return max(1, (n - 1).bit_length())


def fifo_address_bits(link: StreamLink, options: DeviceOptions) -> int:
    """Address bits of ``link``'s RTL FIFO (``2**bits`` beats): a deep stream (``deep_streams``)
    holds ``cache_slots`` whole messages, as many as can be on it at once when ``cache_slots``
    covers mak times the messages one instance leaves at a node (the sizing rule), so its writer
    never waits for room; every other stream ``SMALL_FIFO`` beats, which only decouple writer and
    reader (docs/architecture.md, "FIFO depths, and why loops cannot deadlock"); and a Linear's
    gradient input at least ``dump_fifo_bits``."""
    bits = index_bits(options.cache_slots * link.max_written_beats) if link.deep else index_bits(SMALL_FIFO)
    if link.dump_beats and not options.dump_engine:
        bits = max(bits, dump_fifo_bits(link.dump_beats))
    return bits


def dump_fifo_bits(dump_beats: int) -> int:
    """Address bits of the FIFO into a Linear's ``out0_grad`` when the Linear dumps its GRADS
    inline: it reads no gradient for the ``dump_beats`` cycles its dump streams out, and a FIFO
    that fills stops its writer, then that writer's other readers, so a router feeding several
    kernels' gradients (tree-rnn's phi ``node``: embed's and compose's) stalls them all. It holds
    what its writer can send in that time, a beat a cycle at most: the largest power of two not
    above ``dump_beats`` (the next one up would double the memory for the last few beats, which
    a writer's own headers and gaps leave room for). With the dump engine the Linear only copies G
    (a word a cycle) and keeps the small FIFO; so does a P = 1 Linear asked for it, which
    ``has_dump_engine`` leaves dumping inline (the one case this leaves unabsorbed)."""
    return max(index_bits(SMALL_FIFO), dump_beats.bit_length() - 1)


def deep_streams(streams: Sequence[StreamLink], kinds: Mapping[str, str]) -> frozenset[str]:
    """The streams whose FIFO must hold every message that can be on it at once, so that no set of
    bounded FIFOs can hang the device; ``kinds`` maps each kernel (``k_<node>``) to its kind.

    The argument. By the sizing rule no tag table is ever full, so a kernel at rest takes a
    message from any input that offers one (gradients first, never waiting for a particular
    port), and a kernel waits only in two ways: *for room*, writing a message into a full FIFO
    (a "full" wait on that stream, towards its reader), or *for data*, part-way through reading a
    message from an empty FIFO (an "empty" wait, towards its writer). A reader not taking from a
    full FIFO is itself waiting: for room on one of its outputs, or for data on another input.
    A writer part-way through a message on an empty FIFO is not waiting for room on it: it waits
    for data on one of its inputs (it streams the message through), or -- the kinds in
    ``LOCKSTEP_GRADIENT_KINDS`` -- for room on another output it writes beat by beat together with
    this one. k_demux streams host_in, which the host writes a whole message at a time; k_mux
    writes host_out, which the host drains while it writes host_in (every device driver does).
    If the device hangs, every waiting kernel waits on a waiting kernel, so the waits close a
    cycle. One of only empty waits cannot be: each kernel on it started its message after the one
    it reads from started theirs. So it has a full wait, and a deep stream (never full) on it
    removes it. This function keeps deep just enough DATA streams that no such cycle of waits
    remains: it starts from all of them (checked: the full waits left, on the WEIGHTS, GRADS and
    LOSS streams, close no cycle) and makes each shallow in turn, largest messages first, unless
    that closes a cycle through its own full wait (any new cycle passes through it). Every cycle of the stream graph (a loop, or a forward stream with its
    gradient stream) is a cycle of full waits, so it keeps a deep stream; so does every cycle a
    join's gradients close with their empty waits (two gradient paths of one join that meet
    again upstream)."""
    waits = _Waits(streams, kinds)
    shallow = bytearray(len(streams))  # per stream (in order): its FIFO is small
    for i, link in enumerate(streams):
        shallow[i] = link.kind is not Kind.DATA
    cycle = waits.cycle(shallow)
    if cycle is not None:  # a generator bug (a kernel waiting in a way the argument has no room for)
        raise AmpHlsError(f"the device can hang even with every DATA stream deep: waits {' -> '.join(cycle)}")
    for i in sorted(range(len(streams)), key=lambda i: (-streams[i].max_message_beats, streams[i].name)):
        if not shallow[i]:
            shallow[i] = 1
            if waits.cycle_through(i, shallow) is not None:
                shallow[i] = 0
    return frozenset(link.name for i, link in enumerate(streams) if not shallow[i])


class _Waits:
    """The waits of ``deep_streams``' argument between the streams of one device, as numbers: the
    full wait on stream i (its writer waits for room) is i, the empty wait on it (its reader waits
    for data) is n + i. Each is followed by the waits the kernel that could end it can be in; a
    full wait exists only on a shallow stream."""

    def __init__(self, streams: Sequence[StreamLink], kinds: Mapping[str, str]) -> None:
        self.names = [link.name for link in streams]
        n = len(streams)
        reads: dict[str, list[int]] = {}
        writes: dict[str, list[int]] = {}
        for i, link in enumerate(streams):
            reads.setdefault(link.dst.top, []).append(i)
            writes.setdefault(link.src.top, []).append(i)
        together: dict[int, list[int]] = {}  # stream -> the others its writer writes beat by beat with it
        for top, out in writes.items():
            if kinds.get(top) in LOCKSTEP_GRADIENT_KINDS:
                grads = [i for i in out if streams[i].src.port.endswith("_grad")]
                for i in grads:
                    together[i] = [j for j in grads if j != i]
        self.next: list[list[int]] = []
        for i, link in enumerate(streams):  # full: its reader waits for room, or for data on another input
            room = [] if link.dst.top == "k_mux" else writes.get(link.dst.top, [])
            self.next.append(list(room) + [n + j for j in reads.get(link.dst.top, []) if j != i])
        for i, link in enumerate(streams):  # empty: its writer, part-way through a message on it
            if link.src.top == "k_demux":  # host_in, written a whole message at a time
                self.next.append([])
            else:  # waits for data on its inputs, or room on the outputs it writes together with this one
                self.next.append([n + j for j in reads.get(link.src.top, [])] + together.get(i, []))

    def cycle_through(self, start: int, shallow: bytearray) -> list[str] | None:
        """A cycle of waits through the full wait on stream ``start``, as ``full:s``/``empty:s``
        steps; None when there is none."""
        n = len(self.names)
        parent = [-1] * (2 * n)
        parent[start] = start
        todo = [start]
        while todo:
            v = todo.pop()
            for u in self.next[v]:
                if u < n and not shallow[u]:
                    continue
                if u == start:
                    steps = [v]
                    while steps[-1] != start:
                        steps.append(parent[steps[-1]])
                    return [f"{'full' if w < n else 'empty'}:{self.names[w % n]}" for w in [*reversed(steps), start]]
                if parent[u] < 0:
                    parent[u] = v
                    todo.append(u)
        return None

    def cycle(self, shallow: bytearray) -> list[str] | None:
        """A cycle of waits through some full wait, or None."""
        for i in range(len(self.names)):
            if shallow[i] and (found := self.cycle_through(i, shallow)) is not None:
                return found
        return None


def wait_cycle(design: DeviceDesign, deep: set[str] | frozenset[str] | None = None) -> list[str] | None:
    """A cycle of waits that could hang ``design`` with the streams ``deep`` (default: its own
    deep ones) deep, or None (``deep_streams``' check, for tests and error messages)."""
    kinds = {n.top: n.node.kind for n in design.nodes.values()}
    streams = design.wiring.streams
    shallow = bytearray(not link.deep if deep is None else link.name not in deep for link in streams)
    return _Waits(streams, kinds).cycle(shallow)


def board_fifo_depth(address_bits: int) -> int:
    """The depth of the board's axis_data_fifo on a stream whose RTL amp_fifo has
    ``address_bits``: the same ``2**address_bits`` beats (one rule for both, so the no-deadlock
    argument of ``fifo_address_bits`` holds on the board), at least the IP's smallest depth.
    Beyond ``BOARD_FIFO_MAX`` the IP cannot follow: ``board_fifo_problems`` names such streams."""
    return max(BOARD_FIFO_MIN, 1 << address_bits)


def board_fifo_problems(design: DeviceDesign) -> list[str]:
    """Streams whose FIFO the hls flow's block design cannot instantiate (deeper than the IP's
    largest depth); the rtl flow keeps every FIFO inside ``amp_top`` and has no such limit."""
    return [f"{name} needs {depth} beats" for name, depth in design.board_fifo_depths.items()
            if depth > BOARD_FIFO_MAX]


def _end_lanes(graph: GraphCore, end: StreamEnd) -> int:
    """The lanes of a stream's end: its kernel's node's, 1 at the boundary."""
    return 1 if end.node is None else node_lanes(graph.nodes[end.node])


def _wiring(graph: GraphCore, placement: Placement) -> Wiring:
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
        elif ch.loss_of is not None:  # LOSS out only
            shape = ch.spec.shape(Kind.LOSS)
            shapes[f"loss_{ch.loss_of}"] = (Kind.LOSS, shape.width, shape.max_rows)
            mux_routes.append(dict(channel=ch.channel, name=ch.name, stream=f"loss_{ch.loss_of}"))
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
        kernel_streams[name] = tuple(_edge_streams(graph, node, edge_index))
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
        links.append(StreamLink(s, writers[s][0], readers[s][0], kind, width, max_rows,
                                dump_beats=_dump_beats(readers[s][0], shapes),
                                src_lanes=_end_lanes(graph, writers[s][0]), dst_lanes=_end_lanes(graph, readers[s][0])))
    deep = deep_streams(links, {f"k_{n}": graph.nodes[n].kind for n in placement.device_nodes})
    links = [replace(link, deep=link.name in deep) for link in links]
    return Wiring(tuple(links), tuple(demux_routes), tuple(mux_routes), kernel_streams)


def _dump_beats(reader: StreamEnd, shapes: Mapping[str, tuple[Kind, int, int]]) -> int:
    """The GRADS beats a stream's reader stalls for while it dumps inline: a Linear's (a kernel
    with a ``grads`` stream) on its gradient input, else 0."""
    grads = shapes.get(f"grads_{reader.top[2:]}") if reader.top.startswith("k_") else None
    if grads is None or reader.port != "out0_grad":
        return 0
    return message_beats(*grads)


def _edge_streams(graph: GraphCore, node: Node, edge_index: dict[int, int]) -> list[str]:
    """The stream on each kernel port, in ``kernel_ports`` order."""
    args = []
    for i in range(node.n_inputs):
        e = graph.edge_into(node.name, i)
        args += [f"fwd_{edge_index[id(e)]}", f"bwd_{edge_index[id(e)]}"]
    for j in range(node.n_outputs):
        e = graph.edge_from(node.name, j)
        args += [f"fwd_{edge_index[id(e)]}", f"bwd_{edge_index[id(e)]}"]
    if node.param_shapes():
        args += [f"params_{node.name}", f"grads_{node.name}"]
    if isinstance(node, Loss):
        args.append(f"loss_{node.name}")
    return args
