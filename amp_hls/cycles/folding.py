"""Folding: how many multipliers each Linear kernel gets, and how often gradients are dumped.

As FINN's SetFolding does for inference, the choice balances the pipeline with the cycle model:
the device finishes instances at most at the pace of its busiest kernel, so the busiest Linear is
given more MACs (``parallelism``) until either the target rate is met, the board is full, or the
bottleneck is a kernel that more MACs cannot speed up (it is named). The busiest is counted
without its GRADS dumps: a dump streams out one beat a cycle whatever the MACs, and the pace
prices it on the host link. Each Linear thus ends at the
least parallelism that keeps it within the bottleneck's pace. A step that does not fit the board
is passed for the node's next one that does (a Linear's memories change shape with its
parallelism, so its resources are not monotonic in it). Then the kernels that are not the busiest
but lengthen every instance's round trip (which bounds the pace with few in flight) get steps
while one speeds the latency-priced pace by more than the share of MACs it adds
(``pace_steps``). The gradient-dump period is set (if not given) to the shortest within 5% of
the best pace: each dump carries a whole weight matrix, so at one dump per gradient the link, not
the kernels, would bound a folded design. Last, the row-wise kernels (activation, add, concat,
...) get lanes (wire.py, Lanes: 64-bit beats a cycle): the busiest first, then each step taken
while it speeds the latency-priced pace by more than the share of LUTs it adds (``lane_steps``;
only for the rtl flow, whose kernels take lanes).

The pace is the report's (``report.Pace``): latency priced too, with ``mak`` instances in flight
(the design's ``max_in_flight``) through the host's batches, so a design whose round trip is
longer than ``mak`` bottleneck intervals is named as bound by its in-flight instances (raise
--mak; more MACs shorten the round trip as well).

The message counts come from sample instances run once through the numpy runtime, exactly as the
report counts them (``report.count_messages``); a static graph (no loop, no Ungroup) needs none:
each device port sees one message of its edge's rows per instance. Only the pricing is repeated
per candidate. Every candidate is priced with the resource model (``cycles/resources.py``): LUT,
FF, DSP, BRAM36 and URAM of every kernel, the boundary and the FIFOs, within ``margin`` of the
board's (on a board with URAM the design's well-filled memories go there: ``DeviceOptions.on_board``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..codegen.boards import Board
from ..design import (
    DeviceDesign,
    DeviceOptions,
    NodeDesign,
    StreamLink,
    build_design,
    linear_aligned,
)
from ..errors import AmpHlsError, IRError
from ..ir import LANES, LIMITS, OUTPUTS_PER_STEP, GraphCore, Linear, graph_from_json, node_lanes
from ..ir.validate import strongly_connected
from ..kinds import KINDS, cycle_model
from ..models.inputs import Inputs
from ..placement import Placement
from ..wire import Kind, elements_per_beat
from . import busy_cycles
from .linear import format_shares
from .report import (
    Load,
    Pace,
    batched,
    linear_parts,
    link_beats,
    merged,
    safe_in_flight,
    turns_pace,
)
from .resources import (
    BOARD_RESOURCES,
    LABELS,
    Coefficients,
    DesignResources,
    Resources,
    design_resources,
    kernel_resources,
    link_resources,
    load_coefficients,
    shown_resources,
    with_lanes,
    with_parallelism,
)

MAX_PARALLELISM = LIMITS.max_parallelism  # MACs one Linear kernel may get (ir/limits.py)
DUMP_PERIODS = (1, 2, 4, 8, 16, 32, 64)  # candidate muf values, shortest first; beyond 64 the
# host's weights would lag the device by too many gradients (docs/staleness.md)
MARGIN = 0.9  # of each of the board's resources the folding may use (routing needs the rest)
DSP_MARGIN = MARGIN
PACE_GAIN = 1.01  # a step past the busiest kernel's pace is taken while it speeds the pace by 1%


class FitError(AmpHlsError):
    """A design that does not fit its board, even at the parallelism it was given; ``resource``:
    the first one over its budget (a key of ``BOARD_RESOURCES``)."""

    def __init__(self, message: str, resource: str | None = None) -> None:
        super().__init__(message)
        self.resource = resource


@dataclass(frozen=True)
class Folding:
    """The choice, with what bounds it and what it uses."""

    parallelism: dict[str, int]  # device Linear node -> MACs per cycle
    muf: int  # backward messages per GRADS dump
    cycles: dict[str, float]  # device node -> cycles per instance at the chosen folding
    clock_mhz: float
    dsps: int  # multipliers the Linear kernels instantiate (the sum of their parallelism)
    dsp_budget: int
    link_beats: float  # the busier direction of the host link, beats per instance
    bound: str  # why the folding stopped, naming the node or resource
    resources: DesignResources  # the resource model's prediction at this choice
    board: Board
    pace: Pace  # latency priced too, at the design's mak (report.Pace)
    margin: float = MARGIN
    kinds: dict[str, str] = field(default_factory=dict)  # device node -> kind, for the per-kind sums
    mak_lowered_from: int | None = None  # the default mak whose tag tables did not fit (api.fitting_options)
    limit: str | None = None  # the resource whose budget stopped the folding (None: something else did)
    mak_limit: str | None = None  # the resource one more in flight would exceed, where the mak was lowered
    lutram_depth: int = 0  # the design's memories of at most this many words are in LUT-RAM (memories.py)
    # the bottleneck's cycles per instance by part where it is a Linear (cycles.linear.PARTS), else empty
    bottleneck_parts: dict[str, float] = field(default_factory=dict)
    lanes: dict[str, int] = field(default_factory=dict)  # row-wise node -> the lanes chosen for it (above 1)

    @property
    def bottleneck(self) -> str:
        return max(self.cycles, key=self.cycles.__getitem__)

    @property
    def cycles_per_instance(self) -> float:
        """The predicted cycles per instance: the pace with ``mak`` in flight, never faster than
        the busiest kernel or the host link."""
        return max(self.pace.cycles_per_instance, self.cycles[self.bottleneck], self.link_beats)

    @property
    def instances_per_s(self) -> float:
        return self.clock_mhz * 1e6 / self.cycles_per_instance

    def to_json(self) -> dict[str, object]:
        """The manifest's ``folding`` entry."""
        kinds: dict[str, Resources] = {}
        for name, used in self.resources.kernels.items():
            kind = self.kinds.get(name, "?")
            kinds[kind] = kinds.get(kind, Resources()) + used
        return {"parallelism": dict(self.parallelism), "lanes": dict(self.lanes), "muf": self.muf, "dsps": self.dsps,
                "dsp_budget": self.dsp_budget, "bottleneck": self.bottleneck,
                "cycles_per_instance": {n: round(c, 2) for n, c in self.cycles.items()},
                "link_beats_per_instance": round(self.link_beats, 2), "mak": self.pace.mak,
                "mak_lowered_from": self.mak_lowered_from, "round_trip_cycles": round(self.pace.round_trip, 2),
                "predicted_cycles_per_instance": round(self.cycles_per_instance, 2),
                "instances_per_s": round(self.instances_per_s, 1), "bound": self.bound,
                "bottleneck_parts": {k: round(c, 2) for k, c in self.bottleneck_parts.items()},
                "board": self.board.name, "margin": self.margin, "limit": self.limit, "mak_limit": self.mak_limit,
                "resources": {**self.resources.to_json(self.board),
                              "kinds": {k: r.to_json() for k, r in sorted(kinds.items())}}}


def candidates(node: Linear) -> list[int]:
    """The parallelisms worth trying: the smallest that gives each number of MAC words per row,
    rounded up to whole beats where it is more than one beat's elements and not yet aligned
    (``design.linear_aligned``: its packer and unpacker then need no element shifter, about 80
    LUTs a MAC fewer; the aligned P takes as many words a row or fewer); past one word a row, the
    multiples of a row's lanes that compute several outputs a step (``Linear.outputs_per_step``)."""
    n, epb = node.in_features, elements_per_beat(Kind.DATA)
    out = set()
    for words in range(1, n + 1):
        p = -(-n // words)
        if p > epb and not linear_aligned(n, p):
            p = min(-(-p // epb) * epb, n)
        out.add(p)
    out.update(q * node.row_lanes for q in OUTPUTS_PER_STEP if node.out_features % q == 0)
    return [p for p in sorted(out) if p <= MAX_PARALLELISM]


def is_static(graph: GraphCore) -> bool:
    """No loop and no Ungroup: every instance leaves one message at each port of each node."""
    succ: dict[str, list[str]] = {}
    for e in graph.edges:
        succ.setdefault(e.src.node, []).append(e.dst.node)
    loops = any(len(c) > 1 for c in strongly_connected(graph.nodes, succ))
    return not loops and not any(node.kind == "ungroup" for node in graph.nodes.values())


def structural_loads(placement: Placement) -> dict[str, Load]:
    """The loads of one instance of a static graph: a message of its edge's rows on every port
    of every device node, forward in and gradient back."""
    graph = placement.graph
    loads = {}
    for name in placement.device_nodes:
        node = graph.nodes[name]
        load: Load = Counter()
        for i in range(node.n_inputs):
            load[(f"in{i}", graph.input_spec(name, i).max_rows)] += 1
        for j in range(node.n_outputs):
            load[(f"out{j}_grad", graph.spec(name, j).max_rows)] += 1
        loads[name] = load
    return loads


def _node_cycles(kernel: NodeDesign, node, load: Load, options: DeviceOptions, n: int) -> float:  # noqa: ANN001
    model = cycle_model(node.kind)
    flag = {"skip_dx": True} if kernel.skip_dx else {}
    per_port: dict[str, float] = {}
    for (port, rows), count in load.items():
        cycles = model.message_cycles(node, list(kernel.in_specs), list(kernel.out_specs), options, port, rows, **flag)
        per_port[port] = per_port.get(port, 0.0) + count * cycles / n
    return busy_cycles(node.kind, per_port)


class _Pricer:
    """The resource model of one design, each Linear's kernel repriced per parallelism and each
    row-wise kernel per lanes, with the streams its lanes change (cached)."""

    def __init__(self, design: DeviceDesign, base: DesignResources, coefficients: Coefficients, linears: set[str]):
        self.design, self.base, self.coefficients = design, base, coefficients
        self.fixed_part = base.boundary + base.fifos  # what no parallelism changes
        for name, used in base.kernels.items():
            if name not in linears:
                self.fixed_part = self.fixed_part + used
        self._cache: dict[tuple[str, int], Resources] = {}
        self._laned: dict[tuple[str, int], Resources] = {}
        self._links: dict[tuple[str, int, int], Resources] = {}

    def linear(self, name: str, p: int) -> Resources:
        if (name, p) not in self._cache:
            self._cache[(name, p)] = kernel_resources(with_parallelism(self.design, name, p), name, self.coefficients)
        return self._cache[(name, p)]

    def laned(self, name: str, lanes: int) -> Resources:
        if (name, lanes) not in self._laned:
            self._laned[(name, lanes)] = kernel_resources(with_lanes(self.design, name, lanes), name, self.coefficients)
        return self._laned[(name, lanes)]

    def _link(self, link: StreamLink, src: int, dst: int) -> Resources:
        if (link.name, src, dst) not in self._links:
            at = dataclasses.replace(link, src_lanes=src, dst_lanes=dst)
            self._links[(link.name, src, dst)] = link_resources(at, self.design.options, self.coefficients)
        return self._links[(link.name, src, dst)]

    def _lanes_change(self, lanes: Mapping[str, int]) -> tuple[dict[str, Resources], Resources]:
        """The kernels ``lanes`` reprices, and what it adds to the streams (FIFO widths, converters)."""
        kernels = {name: self.laned(name, n) for name, n in lanes.items()}
        change = Resources()
        for link in self.design.wiring.streams:
            src, dst = (lanes.get(end.node) if end.node is not None else None for end in (link.src, link.dst))
            if src is not None or dst is not None:
                change = change + self._link(link, src or link.src_lanes, dst or link.dst_lanes) \
                    - self._link(link, link.src_lanes, link.dst_lanes)
        return kernels, change

    def total(self, choice: Mapping[str, int], lanes: Mapping[str, int] | None = None) -> Resources:
        out = self.fixed_part
        for name, p in choice.items():
            out = out + self.linear(name, p)
        if lanes:
            kernels, change = self._lanes_change(lanes)
            for name, used in kernels.items():
                out = out + used - self.base.kernels[name]
            out = out + change
        return out

    def resources(self, choice: Mapping[str, int], lanes: Mapping[str, int] | None = None) -> DesignResources:
        kernels = {n: (self.linear(n, choice[n]) if n in choice else r) for n, r in self.base.kernels.items()}
        laned, change = self._lanes_change(lanes or {})
        return DesignResources({**kernels, **laned}, self.base.boundary, self.base.fifos + change, self.base.unpriced)


def _over(total: Resources, budgets: Mapping[str, float]) -> list[str]:
    return [r for r in BOARD_RESOURCES if getattr(total, r) > budgets[r]]


def fold(graph: GraphCore, board: Board, inputs: Sequence[Inputs] | None, options: DeviceOptions,
         target_rate: float | None = None, fixed: Mapping[str, int] | None = None,
         muf: int | None = None, margin: float = MARGIN, seed: int = 0,
         coefficients: Coefficients | None = None, lanes: bool = True) -> Folding:
    """Choose each device Linear's parallelism (``fixed`` ones excepted), the lanes of the
    row-wise kernels the graph leaves at one (``lanes`` False: none, as for the hls flow) and,
    unless ``muf`` is given, the dump period. ``inputs`` are sample instances (None: a static
    graph's own loads); ``target_rate`` (instances/s) stops the folding once met. FitError when
    the design does not fit ``margin`` of the board even at its fixed or least parallelism."""
    if inputs is not None and not inputs:
        raise AmpHlsError("folding needs at least one sample instance")
    fixed = dict(fixed or {})
    options = options.on_board(board)
    linears = _device_linears(graph)
    _check_fixed(graph, fixed, linears)
    start = {name: fixed.get(name, 1) for name in sorted(linears)}
    design = build_design(pin(graph, start), options)  # every Linear at its fixed or least parallelism
    placement = design.placement
    nodes = {name: graph.nodes[name] for name in placement.device_nodes}
    if inputs is None:
        if not is_static(graph):
            raise AmpHlsError(f"graph {graph.name!r} has a loop or an Ungroup: folding needs sample instances")
        loads, n = structural_loads(placement), 1
        mak = options.max_in_flight or options.cache_slots  # one message per node and instance
        batches = [(loads, n)]
    else:
        mak = options.max_in_flight or safe_in_flight(placement, inputs, options.cache_slots)
        batches = batched(placement, inputs, mak, seed)
        loads, n = merged(batches)
    coefficients = coefficients or load_coefficients()
    pricer = _Pricer(design, design_resources(design, coefficients), coefficients, linears)
    budgets = {r: margin * board.resources.get(r, 0) for r in BOARD_RESOURCES}
    over = _over(pricer.total(start), budgets)
    if over:
        raise FitError(_misfit(design, board, margin, pricer.resources(start), over[0], coefficients), over[0])

    def next_fitting(choice: Mapping[str, int], name: str) -> int | None:
        """The node's next parallelism that fits the board with the others at ``choice``. A
        Linear's memories change shape with its parallelism (words of P elements: a deep narrow
        cache in URAM becomes a wide shallow one in block RAM or LUT-RAM), so a step that does not
        fit may be followed by one that does."""
        more = [p for p in candidates(nodes[name]) if p > choice[name]]  # type: ignore[arg-type]
        return next((p for p in more if not _over(pricer.total({**choice, name: p}), budgets)), None)

    def fold_at(period: int) -> tuple[dict[str, int], dict[str, float], str, str | None]:
        """Raise the busiest Linear's parallelism until something else bounds the pace. The
        busiest is the one whose cycles without its GRADS dumps are the most: a dump streams one
        beat a cycle whatever the MACs (the pace prices it on the link), so only the rest is
        what more MACs shorten."""
        opts = dataclasses.replace(options, muf=period)
        no_dump = dataclasses.replace(options, muf=LIMITS.max_muf)  # a dump's share below a cycle
        choice = dict(start)

        def price(name: str, o: DeviceOptions = opts) -> float:
            node = dataclasses.replace(nodes[name], parallelism=choice[name]) if name in choice else nodes[name]  # type: ignore[type-var]
            return _node_cycles(design.nodes[name], node, loads[name], o, n)

        cycles = {name: price(name) for name in nodes}
        bare = {name: price(name, no_dump) for name in nodes}
        while True:
            slowest = max(bare, key=bare.__getitem__)
            if target_rate is not None and rate(period, choice, cycles) >= target_rate:
                return choice, cycles, f"the target rate {target_rate:,.0f} instances/s is met", None
            # the busiest but for GRADS dumps may not be the busiest with them (Folding.bottleneck)
            busiest = "is the bottleneck" if cycles[slowest] >= max(cycles.values()) else \
                "is the busiest kernel, GRADS dumps aside,"
            if slowest not in choice or slowest in fixed:
                reason = "is not a Linear" if slowest not in choice else "has its parallelism fixed"
                return choice, cycles, f"{slowest} ({nodes[slowest].kind}) {busiest} and {reason}", None
            more = [p for p in candidates(nodes[slowest]) if p > choice[slowest]]  # type: ignore[arg-type]
            if not more:
                return choice, cycles, (f"{slowest} (linear) {busiest} at its largest useful "
                                        f"parallelism {choice[slowest]}"), None
            fitting = next_fitting(choice, slowest)
            if fitting is None:
                trial = {**choice, slowest: more[0]}
                r = _over(pricer.total(trial), budgets)[0]
                used = getattr(pricer.total(choice), r)
                return choice, cycles, (f"the {LABELS[r]} budget: {used:,.0f} of {budgets[r]:,.0f} ({margin:.0%} of "
                                        f"{board.name}'s {board.resources.get(r, 0):,}) in use, {slowest} at "
                                        f"parallelism {more[0]} would need {getattr(pricer.total(trial), r) - used:,.0f} more"), r
            choice = {**choice, slowest: fitting}
            cycles[slowest], bare[slowest] = price(slowest), price(slowest, no_dump)

    def pace_of(period: int, choice: Mapping[str, int], widths: Mapping[str, int] | None = None) -> Pace:
        priced = {name: dataclasses.replace(nodes[name], parallelism=p) for name, p in choice.items()}  # type: ignore[type-var]
        priced |= {name: dataclasses.replace(nodes[name], lanes=k) for name, k in (widths or {}).items()}  # type: ignore[type-var]
        return turns_pace(design, loads, n, mak, batches, dataclasses.replace(options, muf=period), priced)

    def rate(period: int, choice: Mapping[str, int], cycles: dict[str, float],
             widths: Mapping[str, int] | None = None) -> float:
        slowest = max(max(cycles.values()), _busier_link(placement, loads, period, n))
        return board.clock_mhz * 1e6 / max(pace_of(period, choice, widths).cycles_per_instance, slowest)

    Step = tuple[str, Any, dict[str, float], float, float]  # node, the state after it, cycles, gain, cost share

    def climb(state: Any, cycles: dict[str, float], now: float,  # noqa: ANN401 - a choice or the lanes
              steps: Callable[[Any, dict[str, float], float], list[Step]]) -> tuple[Any, dict[str, float]]:
        """Take the step (of those ``steps`` offers) that speeds the pace the most per share of
        what it adds, while one speeds it by at least ``PACE_GAIN`` and by at least that share
        (the pace per MAC or LUT does not fall), until the target rate is met."""
        while target_rate is None or now < target_rate:
            worth = [((gain - 1) / added, name, after, c, gain) for name, after, c, gain, added in steps(state, cycles, now)
                     if gain >= max(PACE_GAIN, 1 + added)]
            if not worth:
                break
            _, _, state, cycles, gain = max(worth, key=lambda t: t[0])
            now *= gain
        return state, cycles

    def pace_steps(period: int, choice: dict[str, int], cycles: dict[str, float]) -> tuple[dict[str, int], dict[str, float], str]:
        """Once the busiest kernel goes no faster: a kernel that is not the busiest still
        lengthens an instance's round trip, which bounds the pace with few instances in flight.
        So a Linear's next step (the first that fits) is taken by ``climb``, its cost the share
        of MACs it adds."""
        opts = dataclasses.replace(options, muf=period)

        def steps(at: dict[str, int], cycles: dict[str, float], now: float) -> list[Step]:
            out = []
            for name in sorted(set(at) - set(fixed)):
                p = next_fitting(at, name)
                if p is None:
                    continue
                node = dataclasses.replace(nodes[name], parallelism=p)  # type: ignore[type-var]
                trial_cycles = {**cycles, name: _node_cycles(design.nodes[name], node, loads[name], opts, n)}
                trial = {**at, name: p}
                out.append((name, trial, trial_cycles, rate(period, trial, trial_cycles) / now,
                            (p - at[name]) / sum(at.values())))
            return out

        start = dict(choice)
        choice, cycles = climb(choice, cycles, rate(period, choice, cycles), steps)
        raised = [f"{name} {start[name]} -> {p}" for name, p in choice.items() if p != start[name]]
        return choice, cycles, ", ".join(raised)

    laneable = sorted(name for name in nodes if lanes and KINDS[nodes[name].kind].rtl_lanes
                      and node_lanes(nodes[name]) == 1)

    def lane_steps(period: int, choice: Mapping[str, int],
                   cycles: dict[str, float]) -> tuple[dict[str, int], dict[str, float], str]:
        """Lanes for the row-wise kernels: first, while the busiest kernel of the pace is one
        (and busier than the host link), its lanes are doubled as long as that lowers the
        busiest interval and fits, as ``fold_at`` does for Linears; then, as ``pace_steps``, a
        kernel's next lanes is taken while one speeds the latency-priced pace by at least
        ``PACE_GAIN`` and by at least the share of LUTs it adds (with its streams' wider FIFOs
        and converters), the most speed per added LUT first, until the target rate is met. A
        kernel next to a narrower neighbour reads or writes that stream one 64-bit beat a cycle
        through a converter (``report.converted_beats``), which the pace prices."""
        opts = dataclasses.replace(options, muf=period)
        widths: dict[str, int] = {}
        link = _busier_link(placement, loads, period, n)

        def busiest(at: Mapping[str, int]) -> tuple[str, float]:
            ph = max(pace_of(period, choice, at).phases, key=lambda p: p.busiest)
            return ph.bottleneck, ph.busiest

        name, interval = busiest(widths)
        while name in laneable and interval > link and (target_rate is None or rate(period, choice, cycles, widths) < target_rate):
            more = [k for k in LANES if k > widths.get(name, 1)]
            if not more or _over(pricer.total(choice, {**widths, name: more[0]}), budgets):
                break
            trial = {**widths, name: more[0]}
            after = busiest(trial)
            if after[1] >= interval:
                break
            node = dataclasses.replace(nodes[name], lanes=more[0])  # type: ignore[type-var]
            cycles = {**cycles, name: _node_cycles(design.nodes[name], node, loads[name], opts, n)}
            widths, (name, interval) = trial, after

        def steps(at: dict[str, int], cycles: dict[str, float], now: float) -> list[Step]:
            used = pricer.total(choice, at)
            # a kernel whose cycles an instance are under 1% of the round trip cannot speed the
            # pace by PACE_GAIN: not priced (each pricing is a pace, tens of ms on ggsnn-qm9)
            floor = (PACE_GAIN - 1) * pace_of(period, choice, at).round_trip
            out = []
            for name in (x for x in laneable if cycles[x] >= floor):
                more = [k for k in LANES if k > at.get(name, 1)]
                if not more:
                    continue
                trial = {**at, name: more[0]}
                total = pricer.total(choice, trial)
                if _over(total, budgets):
                    continue
                node = dataclasses.replace(nodes[name], lanes=more[0])  # type: ignore[type-var]
                trial_cycles = {**cycles, name: _node_cycles(design.nodes[name], node, loads[name], opts, n)}
                out.append((name, trial, trial_cycles, rate(period, choice, trial_cycles, trial) / now,
                            max(total.lut - used.lut, 1.0) / used.lut))
            return out

        widths, cycles = climb(widths, cycles, rate(period, choice, cycles, widths), steps)
        return widths, cycles, ", ".join(f"{name} lanes {k}" for name, k in sorted(widths.items()))

    periods = (muf,) if muf is not None else DUMP_PERIODS
    folds = {period: fold_at(period) for period in periods}
    rates = {period: rate(period, f[0], f[1]) for period, f in folds.items()}
    # the shortest period within 5% of the best pace: rarer dumps mean staler weights on the host
    period = next(p for p in periods if rates[p] >= 0.95 * max(rates.values()))
    choice, cycles, bound, limit = folds[period]
    if target_rate is None or rate(period, choice, cycles) < target_rate:
        choice, cycles, raised = pace_steps(period, choice, cycles)
        if raised:
            bound = f"{bound}; then, for the latency-priced pace, {raised}"
    widths: dict[str, int] = {}
    if laneable and (target_rate is None or rate(period, choice, cycles) < target_rate):
        widths, cycles, widened = lane_steps(period, choice, cycles)
        if widened:
            bound = f"{bound}; then {widened}"
    link = _busier_link(placement, loads, period, n)
    chosen = pace_of(period, choice, widths)
    paced = chosen.bound()  # the pace, latency priced: in-flight instances or the link may set it
    if link > max(cycles.values()):
        bound = f"the host link ({link:,.0f} beats/instance at a GRADS dump every {period} gradients)"
        limit = None
        paced = paced if paced.startswith("bound by in-flight") else ""
    if "target rate" not in bound and paced and not paced.startswith("bound by the busiest"):
        bound = f"{bound}; {paced}"
    slowest = max(cycles, key=cycles.__getitem__)
    parts = dict(linear_parts(dataclasses.replace(nodes[slowest], parallelism=choice[slowest]), loads[slowest],  # type: ignore[type-var]
                              dataclasses.replace(options, muf=period), design.nodes[slowest].skip_dx, n)) \
        if slowest in choice else {}
    return Folding(choice, period, cycles, board.clock_mhz, sum(choice.values()),
                   int(board.resources.get("dsp", 0) * margin), link, bound, pricer.resources(choice, widths), board,
                   chosen, margin, {name: node.kind for name, node in nodes.items()}, limit=limit,
                   lutram_depth=options.lutram_depth, bottleneck_parts=parts, lanes=widths)


def _check_fixed(graph: GraphCore, fixed: Mapping[str, int], linears: set[str]) -> None:
    """Each pinned parallelism names a device Linear and is one its kernel takes (``Linear.check_attrs``)."""
    unknown = sorted(set(fixed) - linears)
    if unknown:
        raise AmpHlsError(f"--parallelism names {', '.join(unknown)}: not a device Linear node "
                          f"(the device's Linear nodes: {', '.join(sorted(linears)) or 'none'})")
    for name, p in fixed.items():
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= MAX_PARALLELISM:
            raise AmpHlsError(f"--parallelism {name}={p}: use 1 to {MAX_PARALLELISM}")
        try:
            dataclasses.replace(graph.nodes[name], parallelism=p).check_attrs()  # type: ignore[type-var]
        except IRError as e:
            raise AmpHlsError(f"--parallelism {name}={p}: {e}") from None


def _device_linears(graph: GraphCore) -> set[str]:
    from ..placement import place

    return {n for n in place(graph).device_nodes if isinstance(graph.nodes[n], Linear)}


def pin(graph: GraphCore, parallelism: Mapping[str, int]) -> GraphCore:
    """``graph`` with these device Linear nodes' parallelism (each checked), unfolded otherwise."""
    _check_fixed(graph, parallelism, _device_linears(graph))
    pinned = graph_from_json(graph.to_json())
    for name, p in parallelism.items():
        pinned.nodes[name].parallelism = p  # type: ignore[attr-defined]
    return pinned


def check_fit(graph: GraphCore, board: Board, options: DeviceOptions, margin: float = MARGIN,
              coefficients: Coefficients | None = None) -> DesignResources:
    """The design's predicted resources; FitError when they exceed ``margin`` of the board."""
    coefficients = coefficients or load_coefficients()
    design = build_design(graph, options.on_board(board))
    used = design_resources(design, coefficients)
    over = used.over(board, margin)
    if over:
        raise FitError(_misfit(design, board, margin, used, over[0], coefficients), over[0])
    return used


def largest_fitting_mak(graph: GraphCore, board: Board, options: DeviceOptions, fixed: Mapping[str, int] | None = None,
                        margin: float = MARGIN, coefficients: Coefficients | None = None) -> int:
    """The most instances in flight (at most ``options.max_in_flight``) whose tag tables, sized by
    the rule (``cache_slots`` = mak x the messages per instance ``options`` were sized for), let
    the design fit ``board`` with every Linear at its ``fixed`` or least parallelism (what folding
    starts from); 0 when not even one does."""
    mak = options.max_in_flight
    if mak is None:
        raise AmpHlsError("lowering mak needs options sized for a mak (host.settings.sized_options)")
    per = options.cache_slots // mak
    design = build_design(pin(graph, {n: (fixed or {}).get(n, 1) for n in _device_linears(graph)}), options.on_board(board))
    return min(mak, _slots_that_fit(design, board, margin, coefficients or load_coefficients()) // per)


def _misfit(design: DeviceDesign, board: Board, margin: float, used: DesignResources, resource: str,
            coefficients: Coefficients) -> str:
    """What does not fit, where it goes, and what to lower."""
    options = design.options
    total = getattr(used.total, resource)
    budget = margin * board.resources.get(resource, 0)
    top = ", ".join(f"{name} {amount:,.0f}" for name, amount in used.top_users(resource))
    fixes = []
    slots = _slots_that_fit(design, board, margin, coefficients)
    per = options.cache_slots // options.max_in_flight if options.max_in_flight else None
    # fewer slots help (none at all: something else is too big), but not below one instance's
    if 0 < slots < options.cache_slots and (per is None or slots >= per):
        at = f"at most {slots} fit" + (f" (--mak {slots // per})" if per else "")
        fixes.append(f"--mak or --cache-slots (the tag tables hold {options.cache_slots} entries; {at})")
    pinned = [f"{n}={k.node.parallelism}" for n, k in design.nodes.items()  # type: ignore[attr-defined]
              if isinstance(k.node, Linear) and k.node.parallelism > 1]
    if pinned:
        fixes.append(f"--parallelism ({', '.join(pinned)})")
    what = "; lower " + " or ".join(fixes) if fixes else "; a larger board, or a smaller model"
    return (f"graph {design.graph.name!r} does not fit {board.name}: {LABELS[resource]} {total:,.0f} of {budget:,.0f} "
            f"({margin:.0%} of {board.resources.get(resource, 0):,}, resource model), most in {top or 'the boundary'}{what}")


def _slots_that_fit(design: DeviceDesign, board: Board, margin: float, coefficients: Coefficients) -> int:
    """The most cache slots (at most the design's) with which it fits; 0: not even one."""
    def fits(slots: int) -> bool:
        opts = dataclasses.replace(design.options, cache_slots=slots, max_in_flight=None)
        return not design_resources(design, coefficients, opts).over(board, margin)

    lo, hi = 0, design.options.cache_slots
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _busier_link(placement, loads: dict[str, Load], muf: int, n: int) -> float:  # noqa: ANN001
    return max(link_beats(placement, loads, muf).values()) / n


def apply(graph: GraphCore, folding: Folding) -> GraphCore:
    """``graph`` with the chosen parallelism on its Linear nodes and lanes on its row-wise ones
    (the graph the design is built from)."""
    folded = graph_from_json(graph.to_json())
    for name, p in folding.parallelism.items():
        folded.nodes[name].parallelism = p  # type: ignore[attr-defined]
    for name, k in folding.lanes.items():
        folded.nodes[name].lanes = k  # type: ignore[attr-defined]
    return folded


def format_folding(f: Folding) -> str:
    per_node = ", ".join(f"{n}={p}" for n, p in f.parallelism.items())
    laned = f"; lanes {', '.join(f'{n}={k}' for n, k in f.lanes.items())}" if f.lanes else ""
    total = f.resources.total
    use = ", ".join(f"{LABELS[r]} {getattr(total, r):,.0f}/{f.board.resources.get(r, 0):,}"
                    + (f" ({getattr(total, r) / f.board.resources[r]:.0%})" if f.board.resources.get(r) else "")
                    for r in shown_resources(total.uram, f.board.resources))
    unpriced = "; not priced: " + ", ".join(f"{k} ({', '.join(v)})" for k, v in f.resources.unpriced.items()) \
        if f.resources.unpriced else ""
    lutram = (f"  amp_ram memories of at most {f.lutram_depth} words in LUT-RAM instead of block RAM "
              f"(--lutram-depth)\n") if f.lutram_depth else ""
    return (f"folding: {per_node or 'no Linear on the device'}{laned}; {f.dsps} MACs; "
            f"GRADS every {f.muf} gradients; bottleneck {f.bottleneck} ({f.cycles[f.bottleneck]:,.0f} cycles/instance"
            f"{': ' + format_shares(f.bottleneck_parts) if f.bottleneck_parts else ''}), "
            f"host link {f.link_beats:,.0f} beats/instance, round trip {f.pace.round_trip:,.0f} cycles at mak "
            f"{f.pace.mak} -> {f.instances_per_s:,.0f} instances/s at {f.clock_mhz:g} MHz (cycle model); "
            f"stopped by {f.bound}\n{lutram}"
            f"  resources (model, {f.margin:.0%} of each usable): {use}{unpriced}")
