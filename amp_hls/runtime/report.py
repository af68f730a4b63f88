"""Run reports, written as training goes: the per-epoch log (CSV or JSON lines), TensorBoard
events (when a writer is installed), the plots and the JSON summary file."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from ..errors import AmpHlsError
from ..extras import importable, install_line, require
from .trainer import EpochRecord

Curve = Sequence[tuple[float, float]]  # (wall seconds, metric)
LOG_FORMATS = (".csv", ".jsonl")
LOG_FIELDS = tuple(f.name for f in fields(EpochRecord))


def _pyplot() -> Any:
    require("plot", "plots")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_history(history: Sequence[EpochRecord], path: str | Path, metric: str = "accuracy",
                 target: float | None = None, title: str = "") -> None:
    """``history_figure`` as a PNG."""
    plt = _pyplot()
    fig = history_figure(history, metric, target, title)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def history_figure(history: Sequence[EpochRecord], metric: str = "accuracy", target: float | None = None,
                   title: str = "") -> Any:
    """Loss and ``metric`` per epoch, in training and on the validation set, side by side; the
    target as a dashed line on the metric (a matplotlib Figure)."""
    plt = _pyplot()
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(9.6, 4.0))
    epochs = [r.epoch for r in history]
    for ax, what, train, val in ((ax_loss, "loss", "train_loss", "val_loss"),
                                 (ax_metric, metric, "train_metric", "val_metric")):
        ax.plot(epochs, [getattr(r, train) for r in history], marker="o", markersize=3, label="training")
        ax.plot(epochs, [getattr(r, val) for r in history], marker="s", markersize=3, label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    if target is not None:
        ax_metric.axhline(target, linestyle="--", color="grey", linewidth=1, label=f"target {target:g}")
    for ax in (ax_loss, ax_metric):
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_curves(
    curves: Mapping[str, Curve], path: str | Path, metric: str = "validation accuracy",
    target: float | None = None, title: str = "",
) -> None:
    """One line per system: ``metric`` against wall time, the target as a dashed line."""
    plt = _pyplot()
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


def check_log_path(path: str | Path) -> Path:
    """``path`` if its suffix names a log format; an error now, not after the first epoch."""
    path = Path(path)
    if path.suffix not in LOG_FORMATS:
        raise AmpHlsError(f"epoch log {path}: use a {' or '.join(LOG_FORMATS)} file")
    return path


class EpochLog:
    """One line per epoch (the ``EpochRecord`` fields) appended to a CSV or JSON lines file and
    flushed at once, so a run that stops keeps what it finished. ``append`` continues a file
    (a resumed run); otherwise the file starts afresh."""

    def __init__(self, path: str | Path, append: bool = False):
        self.path = check_log_path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not append or not self.path.exists() or self.path.stat().st_size == 0
        self.file = self.path.open("w" if not append else "a", encoding="utf-8", newline="")
        self.csv = csv.DictWriter(self.file, LOG_FIELDS, lineterminator="\n") if self.path.suffix == ".csv" else None
        if self.csv is not None and fresh:
            self.csv.writeheader()
            self.file.flush()

    def write(self, record: EpochRecord) -> None:
        row = asdict(record)
        if self.csv is not None:
            self.csv.writerow(row)
        else:
            self.file.write(json.dumps(_finite(row)) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def tensorboard_available() -> bool:
    """A TensorBoard event writer is installed: ``torch.utils.tensorboard`` (torch with the
    tensorboard package) or ``tensorboardX``."""
    return (importable("torch") and importable("tensorboard")) or importable("tensorboardX")


def require_tensorboard() -> None:
    if not tensorboard_available():
        raise AmpHlsError(f"TensorBoard event files need tensorboardX (or torch with tensorboard): "
                          f"{install_line('tensorboard')}")


class TensorBoardLog:
    """TensorBoard event files in ``logdir``: loss and metric per epoch, training and validation."""

    def __init__(self, logdir: str | Path, metric: str):
        require_tensorboard()
        try:  # imported here: neither is a dependency, and torch is large
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            from tensorboardX import SummaryWriter
        self.writer = SummaryWriter(str(logdir))
        self.metric = metric

    def write(self, record: EpochRecord) -> None:
        for name, value in (("loss/train", record.train_loss), ("loss/val", record.val_loss),
                            (f"{self.metric}/train", record.train_metric), (f"{self.metric}/val", record.val_metric)):
            self.writer.add_scalar(name, value, record.epoch)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
