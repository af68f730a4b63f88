"""Examples and train/validation/test splits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Example:
    """One labelled instance before it becomes messages: model-specific ``data`` and a label."""

    data: Any
    label: int


@dataclass(frozen=True)
class Splits:
    name: str
    train: Sequence[Example]
    val: Sequence[Example]
    test: Sequence[Example]
    description: str = ""


def split(
    name: str, examples: Sequence[Example], seed: int, val: float = 0.15, test: float = 0.15, description: str = ""
) -> Splits:
    """Shuffle with ``seed`` and cut into train / validation / test."""
    order = np.random.default_rng(seed).permutation(len(examples))
    n_val, n_test = int(len(examples) * val), int(len(examples) * test)
    pick = [examples[i] for i in order]
    return Splits(name, pick[n_val + n_test :], pick[:n_val], pick[n_val : n_val + n_test], description)
