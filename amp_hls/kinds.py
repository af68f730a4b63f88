"""One table of node kinds: a row per kind naming everything that implements it.

Each executor finds a kind's implementation here and nowhere else: the numpy runtime its kernel
class, the HLS generator its C++ template, the RTL generator its SystemVerilog template, the
report its cycle model. A kind that runs only on the host (source, sink) has no hardware
entries. ``tests/test_kinds.py`` holds the table complete: every IR kind has a row, every named
template and cycle model exists. Adding a kind: docs/adding-a-node-kind.md.

The IR keeps its own registry (``ir.NODE_KINDS``, filled by subclassing ``ir.Node``) because the
IR sits below everything else; the table is checked against it. Whether a kind has parameters
is the IR node's own answer (``Node.param_shapes``), not a column here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from . import ir
from .errors import AmpHlsError, KernelError
from .ir import GraphCore, Node
from .kernels import (
    ActivationKernel,
    AddKernel,
    AggregateKernel,
    BroadcastKernel,
    ConcatKernel,
    CondKernel,
    GroupKernel,
    IsuKernel,
    Kernel,
    LinearKernel,
    LossKernel,
    MulKernel,
    ParamKernel,
    PhiKernel,
    RowSumKernel,
    SinkKernel,
    SourceKernel,
    SplitKernel,
    UngroupKernel,
)
from .numerics import NumericConfig, SaturationCounter

HLS_TEMPLATES = "hls/kernels"  # templates/hls/kernels/<kind>.cpp.j2
RTL_TEMPLATES = "rtl/kernels"  # templates/rtl/kernels/<kind>.sv.j2
CYCLE_MODELS = "amp_hls.cycles"  # amp_hls/cycles/<kind>.py


@dataclass(frozen=True)
class KindRow:
    """Everything that implements one node kind; ``device`` False for host-only kinds."""

    ir: type[Node]
    kernel: type[Kernel]
    device: bool = True
    rtl_lanes: bool = False  # the RTL kernel takes the node's ``lanes`` (amp_hls.wire, Lanes)

    @property
    def kind(self) -> str:
        return self.ir.kind

    @property
    def hls_template(self) -> str | None:
        """The HLS C++ kernel's template, relative to ``templates/``."""
        return f"{HLS_TEMPLATES}/{self.kind}.cpp.j2" if self.device else None

    @property
    def rtl_template(self) -> str | None:
        """The RTL kernel's template, relative to ``templates/``."""
        return f"{RTL_TEMPLATES}/{self.kind}.sv.j2" if self.device else None

    @property
    def cycle_model(self) -> str | None:
        """The cycle model's module (``message_cycles(node, in_specs, out_specs, options, port, rows)``)."""
        return f"{CYCLE_MODELS}.{self.kind}" if self.device else None


KINDS: dict[str, KindRow] = {
    row.kind: row
    for row in (
        KindRow(ir.Source, SourceKernel, device=False),
        KindRow(ir.Sink, SinkKernel, device=False),
        KindRow(ir.Loss, LossKernel),
        KindRow(ir.Linear, LinearKernel),
        KindRow(ir.Activation, ActivationKernel, rtl_lanes=True),
        KindRow(ir.Add, AddKernel, rtl_lanes=True),
        KindRow(ir.Mul, MulKernel, rtl_lanes=True),
        KindRow(ir.Concat, ConcatKernel, rtl_lanes=True),
        KindRow(ir.Split, SplitKernel, rtl_lanes=True),
        KindRow(ir.Broadcast, BroadcastKernel, rtl_lanes=True),
        KindRow(ir.Cond, CondKernel),
        KindRow(ir.Phi, PhiKernel),
        KindRow(ir.Isu, IsuKernel),
        KindRow(ir.Ungroup, UngroupKernel, rtl_lanes=True),
        KindRow(ir.Group, GroupKernel, rtl_lanes=True),
        KindRow(ir.Aggregate, AggregateKernel, rtl_lanes=True),
        KindRow(ir.RowSum, RowSumKernel, rtl_lanes=True),
    )
}


def kind_row(kind: str) -> KindRow:
    """The row of ``kind``; AmpHlsError naming the known kinds when there is none."""
    row = KINDS.get(kind)
    if row is None:
        raise AmpHlsError(f"unknown node kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    return row


def device_kinds() -> tuple[str, ...]:
    """The kinds a device can run (each with an HLS kernel, an RTL kernel and a cycle model)."""
    return tuple(sorted(k for k, row in KINDS.items() if row.device))


def cycle_model(kind: str) -> ModuleType:
    """The cycle-model module of one node kind; AmpHlsError when it has none."""
    row = KINDS.get(kind)
    if row is None or row.cycle_model is None:
        raise AmpHlsError(f"no cycle model for node kind {kind!r}")
    return importlib.import_module(row.cycle_model)


def make_kernel(
    node: Node,
    graph: GraphCore,
    numerics: NumericConfig,
    counter: SaturationCounter | None = None,
    rng: np.random.Generator | None = None,
) -> Kernel:
    """The numpy kernel of ``node`` (``rng`` initialises parameters; other kinds ignore it)."""
    row = KINDS.get(node.kind)
    if row is None:
        raise KernelError(f"node '{node.name}': no kernel for node kind {node.kind!r}")
    if issubclass(row.kernel, ParamKernel):
        return row.kernel(node, graph, numerics, counter, rng)
    return row.kernel(node, graph, numerics, counter)
