"""What one instance feeds the graph: per source, its tag state and its payload."""

from __future__ import annotations

import numpy as np

Inputs = dict[str, tuple[tuple[int, ...], np.ndarray]]
