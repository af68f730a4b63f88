"""Run reports: the metric-vs-wall-time plot and the JSON summary file."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError

Curve = Sequence[tuple[float, float]]  # (wall seconds, metric)


def plot_curves(
    curves: Mapping[str, Curve], path: str | Path, metric: str = "validation accuracy",
    target: float | None = None, title: str = "",
) -> None:
    """One line per system: ``metric`` against wall time, the target as a dashed line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise AmpHlsError("plots need matplotlib: pip install 'amp-hls[plot]'") from None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, points in curves.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
    if target is not None:
        ax.axhline(target, linestyle="--", color="grey", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel(metric)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_json(doc: Any, path: str | Path) -> None:
    """Write ``doc`` as JSON; NaN becomes null so any JSON reader accepts the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(doc), indent=2) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
