"""Data sets: bundled (scikit-learn digits) or generated deterministically from a seed."""

from .base import Example, Splits, split
from .digits import load_digits_splits
from .lists import generate_max_lists

__all__ = ["Example", "Splits", "generate_max_lists", "load_digits_splits", "split"]
