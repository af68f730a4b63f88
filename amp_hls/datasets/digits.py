"""scikit-learn's bundled 8x8 digits (1,797 images; no download)."""

from __future__ import annotations

from ..errors import AmpHlsError
from .base import Example, Splits, split


def load_digits_splits(seed: int = 0) -> Splits:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise AmpHlsError(
            "the digits data set needs scikit-learn: pip install 'amp-hls[data]'"
        ) from None
    digits = load_digits()
    examples = [Example(x / 16.0, int(y)) for x, y in zip(digits.data, digits.target)]
    return split("digits", examples, seed, description="scikit-learn load_digits, pixels scaled to [0, 1]")
