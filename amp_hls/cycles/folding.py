"""Folding: how many multipliers each Linear kernel gets, and how often gradients are dumped.

As FINN's SetFolding does for inference, the choice balances the pipeline with the cycle model:
the device finishes instances at the pace of its busiest kernel, so the busiest Linear is given
more MACs (``parallelism``) until either the target rate is met, the DSP budget is spent, or the
bottleneck is a kernel that more MACs cannot speed up (it is named). Then the gradient-dump period
is set (if not given) to the shortest that keeps the host link from being the bottleneck: each
dump carries a whole weight matrix, so at one dump per gradient the link, not the kernels, would
bound a folded design.

The message counts come from sample instances run once through the numpy runtime, exactly as the
report counts them (``report.count_messages``); only the pricing is repeated per candidate.
Multipliers are the one resource priced so far: one DSP slice per MAC (a 16x16 product), against
``margin`` of the board's DSPs. LUT, FF and BRAM use is not modelled yet: ``amp-hls estimate``
synthesises the result with Yosys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..codegen.boards import Board
from ..design import DeviceOptions
from ..errors import AmpHlsError
from ..ir import LIMITS, GraphCore, Linear, graph_from_json
from ..kinds import cycle_model
from ..models.inputs import Inputs
from ..placement import place
from .report import Load, count_messages, link_beats

MAX_PARALLELISM = LIMITS.max_parallelism  # MACs one Linear kernel may get (ir/limits.py)
DUMP_PERIODS = (1, 2, 4, 8, 16, 32, 64)  # candidate muf values, shortest first; beyond 64 the
# host's weights would lag the device by too many gradients (docs/staleness.md)
DSP_MARGIN = 0.9  # of the board's DSP slices the folding may use


@dataclass(frozen=True)
class Folding:
    """The choice, with what bounds it."""

    parallelism: dict[str, int]  # device Linear node -> MACs per cycle
    muf: int  # backward messages per GRADS dump
    cycles: dict[str, float]  # device node -> cycles per instance at the chosen folding
    clock_mhz: float
    dsps: int  # multipliers instantiated
    dsp_budget: int
    link_beats: float  # the busier direction of the host link, beats per instance
    bound: str  # why the folding stopped, naming the node or resource

    @property
    def bottleneck(self) -> str:
        return max(self.cycles, key=self.cycles.__getitem__)

    @property
    def instances_per_s(self) -> float:
        """The device's pace: the slower of its busiest kernel and the host link."""
        return self.clock_mhz * 1e6 / max(self.cycles[self.bottleneck], self.link_beats)

    def to_json(self) -> dict[str, object]:
        return {"parallelism": dict(self.parallelism), "muf": self.muf, "dsps": self.dsps,
                "dsp_budget": self.dsp_budget, "bottleneck": self.bottleneck,
                "cycles_per_instance": {n: round(c, 2) for n, c in self.cycles.items()},
                "link_beats_per_instance": round(self.link_beats, 2),
                "instances_per_s": round(self.instances_per_s, 1), "bound": self.bound}


def candidates(node: Linear) -> list[int]:
    """The parallelisms worth trying: the smallest that gives each number of MAC words per row."""
    out = sorted({-(-node.in_features // words) for words in range(1, node.in_features + 1)})
    return [p for p in out if p <= MAX_PARALLELISM]


def _node_cycles(node, graph: GraphCore, load: Load, options: DeviceOptions, n: int) -> float:  # noqa: ANN001
    in_specs = [graph.input_spec(node.name, i) for i in range(node.n_inputs)]
    out_specs = [graph.spec(node.name, j) for j in range(node.n_outputs)]
    model = cycle_model(node.kind)
    return sum(count * model.message_cycles(node, in_specs, out_specs, options, port, rows)
               for (port, rows), count in load.items()) / n


def fold(graph: GraphCore, board: Board, inputs: Sequence[Inputs], options: DeviceOptions,
         target_rate: float | None = None, fixed: Mapping[str, int] | None = None,
         muf: int | None = None, margin: float = DSP_MARGIN, seed: int = 0) -> Folding:
    """Choose each device Linear's parallelism (``fixed`` ones excepted) and, unless ``muf`` is
    given, the dump period. ``inputs`` are sample instances; ``target_rate`` (instances/s) stops
    the folding once met. AmpHlsError when the fixed choices alone exceed the DSP budget."""
    if not inputs:
        raise AmpHlsError("folding needs at least one sample instance")
    fixed = dict(fixed or {})
    placement = place(graph)
    nodes = {name: graph.nodes[name] for name in placement.device_nodes}
    linears = {name for name, node in nodes.items() if isinstance(node, Linear)}
    unknown = sorted(set(fixed) - linears)
    if unknown:
        raise AmpHlsError(f"--parallelism names {', '.join(unknown)}: not a device Linear node "
                          f"(the device's Linear nodes: {', '.join(sorted(linears)) or 'none'})")
    for name, p in fixed.items():
        if not 1 <= p <= MAX_PARALLELISM:
            raise AmpHlsError(f"--parallelism {name}={p}: use 1 to {MAX_PARALLELISM}")
    loads = count_messages(placement, inputs, seed)
    n = len(inputs)
    budget = int(board.resources.get("dsp", 0) * margin)
    choice = {name: fixed.get(name, 1) for name in sorted(linears)}
    if sum(choice.values()) > budget:
        raise AmpHlsError(f"the Linear nodes need {sum(choice.values())} DSP slices at their fixed or least "
                          f"parallelism, {budget} of {board.name}'s {board.resources.get('dsp', 0)} are available "
                          f"({margin:.0%}): lower --parallelism")

    def fold_at(period: int) -> tuple[dict[str, int], dict[str, float], str]:
        """Raise the busiest Linear's parallelism until something else bounds the pace."""
        opts = dataclasses.replace(options, muf=period)
        choice = {name: fixed.get(name, 1) for name in sorted(linears)}

        def price(name: str) -> float:
            node = dataclasses.replace(nodes[name], parallelism=choice[name]) if name in choice else nodes[name]
            return _node_cycles(node, graph, loads[name], opts, n)

        cycles = {name: price(name) for name in nodes}
        while True:
            slowest = max(cycles, key=cycles.__getitem__)
            if target_rate is not None and board.clock_mhz * 1e6 / cycles[slowest] >= target_rate:
                return choice, cycles, f"the target rate {target_rate:,.0f} instances/s is met"
            if slowest not in choice or slowest in fixed:
                reason = "is not a Linear" if slowest not in choice else "has its parallelism fixed"
                return choice, cycles, f"{slowest} ({nodes[slowest].kind}) is the bottleneck and {reason}"
            more = [p for p in candidates(nodes[slowest]) if p > choice[slowest]]  # type: ignore[arg-type]
            if not more:
                return choice, cycles, (f"{slowest} (linear) is the bottleneck at its largest useful "
                                        f"parallelism {choice[slowest]}")
            if sum(choice.values()) - choice[slowest] + more[0] > budget:
                return choice, cycles, (f"the DSP budget: {sum(choice.values())} of {budget} ({margin:.0%} of "
                                        f"{board.name}'s {board.resources.get('dsp', 0)}) in use, {slowest} needs {more[0]}")
            choice[slowest] = more[0]
            cycles[slowest] = price(slowest)

    def rate(period: int, cycles: dict[str, float]) -> float:
        return board.clock_mhz * 1e6 / max(max(cycles.values()), _busier_link(placement, loads, period, n))

    periods = (muf,) if muf is not None else DUMP_PERIODS
    folds = {period: fold_at(period) for period in periods}
    best = max(rate(period, f[1]) for period, f in folds.items())
    # the shortest period within 5% of the best pace: rarer dumps mean staler weights on the host
    period = next(p for p in periods if rate(p, folds[p][1]) >= 0.95 * best)
    choice, cycles, bound = folds[period]
    link = _busier_link(placement, loads, period, n)
    if link > max(cycles.values()):
        bound = f"the host link ({link:,.0f} beats/instance at a GRADS dump every {period} gradients)"
    return Folding(choice, period, cycles, board.clock_mhz, sum(choice.values()), budget, link, bound)


def _busier_link(placement, loads: dict[str, Load], muf: int, n: int) -> float:  # noqa: ANN001
    return max(link_beats(placement, loads, muf).values()) / n


def apply(graph: GraphCore, folding: Folding) -> GraphCore:
    """``graph`` with the chosen parallelism on its Linear nodes (the graph the design is built from)."""
    folded = graph_from_json(graph.to_json())
    for name, p in folding.parallelism.items():
        folded.nodes[name].parallelism = p  # type: ignore[attr-defined]
    return folded


def format_folding(f: Folding) -> str:
    per_node = ", ".join(f"{n}={p}" for n, p in f.parallelism.items())
    return (f"folding: {per_node or 'no Linear on the device'}; {f.dsps} of {f.dsp_budget} DSP slices; "
            f"GRADS every {f.muf} gradients; bottleneck {f.bottleneck} ({f.cycles[f.bottleneck]:,.0f} cycles/instance), "
            f"host link {f.link_beats:,.0f} beats/instance -> {f.instances_per_s:,.0f} instances/s at "
            f"{f.clock_mhz:g} MHz (cycle model); stopped by {f.bound}")
