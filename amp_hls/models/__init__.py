"""The model zoo: each entry pairs a graph builder with its data and training defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..datasets import Example, Splits, generate_max_lists, load_digits_splits
from ..ir import Graph
from .inputs import Inputs
from .list_rnn import build_list_rnn, list_rnn_inputs
from .mlp import build_mlp, mlp_inputs


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    build: Callable[[], Graph]
    data: Callable[[int], Splits]  # seed -> splits
    inputs: Callable[[Graph, Example], Inputs]
    target: float  # default validation accuracy to stop at
    defaults: dict[str, Any] = field(default_factory=dict)  # training hyper-parameters


MODELS: dict[str, ModelEntry] = {
    "mlp": ModelEntry(
        "mlp",
        "MLP classifier of scikit-learn's 8x8 digits (rows = 1)",
        build_mlp,
        load_digits_splits,
        mlp_inputs,
        target=0.98,
        defaults={"mak": 16, "muf": 8, "lr": 3e-3, "epochs": 40},
    ),
    "list-rnn": ModelEntry(
        "list-rnn",
        "recurrent cell unrolled by Phi/Isu/Cond over generated lists; predicts the maximum",
        build_list_rnn,
        lambda seed: generate_max_lists(seed=seed),
        list_rnn_inputs,
        target=0.97,
        defaults={"mak": 16, "muf": 8, "lr": 3e-3, "epochs": 20},
    ),
}

__all__ = ["MODELS", "Inputs", "ModelEntry", "build_list_rnn", "build_mlp", "list_rnn_inputs", "mlp_inputs"]
