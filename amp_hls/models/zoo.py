"""What a zoo entry is: a graph builder paired with its data, its metric and training defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..datasets import Example, Splits
from ..ir import Graph
from .inputs import Inputs

METRICS = ("accuracy", "mae")  # accuracy: higher is better; mae: lower is better


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    build: Callable[[], Graph]
    data: Callable[[int], Splits]  # seed -> splits
    inputs: Callable[[Graph, Example], Inputs]
    target: float  # the validation metric to stop at
    defaults: dict[str, Any] = field(default_factory=dict)  # training hyper-parameters
    metric: str = "accuracy"
    # mae only: the model regresses normalised targets; errors are reported times this scale
    # (e.g. the target's standard deviation in eV), in ``metric_unit``.
    metric_scale: float = 1.0
    metric_unit: str = ""

    def better(self, value: float, than: float) -> bool:
        return value >= than if self.metric == "accuracy" else value <= than
