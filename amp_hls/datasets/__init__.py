"""Data sets: bundled (scikit-learn digits), generated deterministically from a seed, or yours
from a file (files.py: JSON lines, CSV, npz)."""

from .base import Example, Splits, split
from .digits import load_digits_splits
from .files import DATA_FORMATS, NO_LABEL, load_dataset, load_examples
from .lists import generate_max_lists

__all__ = ["DATA_FORMATS", "NO_LABEL", "Example", "Splits", "generate_max_lists", "load_dataset",
           "load_digits_splits", "load_examples", "split"]
