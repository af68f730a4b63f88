"""numpy kernels for every node kind: the golden reference of every executor (docs/contracts.md)."""

from .activation import ActivationKernel
from .base import Emit, JoinBuffer, Kernel, StalenessStats, TagCache
from .host import LossKernel, LossRecord, SinkKernel, SourceKernel
from .joins import AddKernel, ConcatKernel, JoinKernel, MulKernel
from .linear import LinearKernel, ParamKernel
from .routing import BroadcastKernel, CondKernel, IsuKernel, PhiKernel, SplitKernel
from .rows import AggregateKernel, GroupKernel, RowSumKernel, UngroupKernel

__all__ = [
    "ActivationKernel", "AddKernel", "AggregateKernel", "BroadcastKernel",
    "ConcatKernel", "CondKernel", "Emit", "GroupKernel", "IsuKernel", "JoinBuffer", "JoinKernel",
    "Kernel", "LinearKernel", "LossKernel", "LossRecord", "MulKernel", "ParamKernel", "PhiKernel",
    "RowSumKernel", "SinkKernel", "SourceKernel", "SplitKernel", "StalenessStats", "TagCache",
    "UngroupKernel",
]
