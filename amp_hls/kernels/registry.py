"""``make_kernel``: the one place that maps a node kind to its kernel class."""

from __future__ import annotations

import numpy as np

from ..errors import KernelError
from ..ir import GraphCore, Node
from ..numerics import NumericConfig, SaturationCounter
from .activation import ActivationKernel
from .base import Kernel
from .host import LossKernel, SinkKernel, SourceKernel
from .joins import AddKernel, ConcatKernel, MulKernel
from .linear import LinearKernel, ParamKernel
from .routing import BroadcastKernel, CondKernel, IsuKernel, PhiKernel, SplitKernel
from .rows import AggregateKernel, GroupKernel, RowSumKernel, UngroupKernel

KERNELS: dict[str, type[Kernel]] = {
    k.kind: k
    for k in (
        SourceKernel, SinkKernel, LossKernel, LinearKernel, ActivationKernel, AddKernel,
        MulKernel, ConcatKernel, SplitKernel, BroadcastKernel, CondKernel, PhiKernel, IsuKernel,
        UngroupKernel, GroupKernel, AggregateKernel, RowSumKernel,
    )
}


def make_kernel(
    node: Node,
    graph: GraphCore,
    numerics: NumericConfig,
    counter: SaturationCounter | None = None,
    rng: np.random.Generator | None = None,
) -> Kernel:
    """The kernel of ``node`` (``rng`` initialises parameters; other kinds ignore it)."""
    cls = KERNELS.get(node.kind)
    if cls is None:
        raise KernelError(f"node '{node.name}': no kernel for node kind {node.kind!r}")
    if issubclass(cls, ParamKernel):
        return cls(node, graph, numerics, counter, rng)
    return cls(node, graph, numerics, counter)
