"""scikit-learn's bundled 8x8 digits (1,797 images; no download)."""

from __future__ import annotations

from ..extras import require
from .base import Example, Splits, split


def load_digits_splits(seed: int = 0) -> Splits:
    require("data", "the digits data set")
    from sklearn.datasets import load_digits

    digits = load_digits()
    examples = [Example(x / 16.0, int(y)) for x, y in zip(digits.data, digits.target)]
    return split("digits", examples, seed, description="scikit-learn load_digits, pixels scaled to [0, 1]")
