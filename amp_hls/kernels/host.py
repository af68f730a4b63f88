"""Host-side kernels: Source (instances in), Sink (outputs out) and Loss (the backward's origin)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import NonFiniteError
from ..ir import EdgeSpec, GraphCore, Loss, Node, Source
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig, SaturationCounter, dequantize, loss_fixed, loss_frac, quantize
from ..wire import LOSS_WIDTH
from .base import (
    Emit,
    JoinBuffer,
    Kernel,
    TagCache,
    backward_msg,
    forward_msg,
)
from .common import check_grads, check_inputs, index_rows, stack_ports, zero_grad


def payload_problem(spec: EdgeSpec, p: np.ndarray) -> str | None:
    """Why ``p`` cannot be what a source of ``spec`` sends; None when it can. The one check of
    user payloads: the source kernel's, and the model check's before training."""
    if p.ndim != 2 or p.shape[1] != spec.width or not 1 <= p.shape[0] <= spec.max_rows:
        return f"payload of shape {p.shape} does not fit {spec}"
    kind = p.dtype.kind  # i, u: integer; f: floating
    if kind not in "iuf":
        return f"payload of dtype {p.dtype} is not numeric"
    if spec.dtype == "index":
        if kind == "f" and not np.all(np.isfinite(p) & (p == np.round(p))):
            return "index payload holds non-integer values"
        if np.any(p < 0):
            return "index payload holds negative values"
    return None


class SourceKernel(Kernel):
    """Converts user payloads to the numeric mode; a gradient arriving back completes a message.

    In training every emitted tag is held until its gradient returns, so ``pending()`` counts the
    messages of unfinished instances and a gradient for a tag never sent is caught.
    """

    kind = "source"
    node: Source

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.in_flight = TagCache(self, "source in flight")
        self.completed = 0

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        if port != 0:
            raise self.error(f"a source is fed on port 0, got {port}")
        out = []
        for m in msgs:
            payload = self._convert(m)
            if train:
                self.in_flight.put(m.tag, None)
            out.append((0, forward_msg(m.tag, payload)))
        return out

    def _convert(self, msg: Message) -> np.ndarray:
        spec = self.out_specs[0]
        p = np.asarray(msg.payload)
        problem = payload_problem(spec, p)
        if problem:
            raise self.error(f"{problem} (tag {msg.tag})")
        if spec.dtype == "index":
            return p.astype(np.int64)
        if self.fixed:
            return quantize(p, self.numerics.data, self.counter, self.site("in"))
        return p.astype(self.dtype)

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        for m in msgs:
            self.in_flight.take(m.tag)
        self.completed += len(msgs)
        return []

    def pending(self) -> int:
        return len(self.in_flight)


class SinkKernel(Kernel):
    """Collects forward outputs; in training answers each with a zero gradient (conservation)."""

    kind = "sink"

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.outputs: list[tuple[Tag, np.ndarray]] = []

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        self.outputs.extend((m.tag, m.payload) for m in msgs)
        if not train:
            return []
        return [(0, backward_msg(m.tag, zero_grad(self, m))) for m in msgs]


@dataclass
class LossRecord:
    """One evaluated instance: the loss, what was predicted (real-valued) and whether it was right.

    ``report``: in fixed point, the instance's LOSS message payload (``wire.LOSS_FIELDS``), what a
    device Loss node sends the host; None in float mode."""

    tag: Tag
    loss: float
    prediction: np.ndarray
    target: np.ndarray
    correct: bool | None
    report: np.ndarray | None = None

    @classmethod
    def from_report(cls, tag: Tag, fn: str, width: int, numerics: NumericConfig, payload: np.ndarray) -> LossRecord:
        """The record of a LOSS message from a device Loss node over predictions ``width`` wide.
        The device sends no prediction rows: for mse, ``prediction`` holds the mean absolute
        error against a zero ``target`` (``prediction - target`` is what the mae metric reads)."""
        words = np.asarray(payload, dtype=np.int64).reshape(1, LOSS_WIDTH)
        loss, metric, rows = (int(v) for v in words[0])
        value = loss / (1 << loss_frac(fn, numerics.data))
        if fn == "mse":
            mae = metric / numerics.data.one / (max(rows, 1) * width)
            return cls(tag, value, np.full((1, 1), mae), np.zeros((1, 1)), None, words)
        return cls(tag, value, np.zeros((0, width)), np.zeros((0, 1)), bool(metric), words)


class LossKernel(Kernel):
    """Joins prediction and target, records the loss of each instance and emits the gradient.

    Float mode computes in float64. Fixed mode is ``numerics.loss_fixed``, integer arithmetic
    with the exp/log tables of ``numerics.loss_tables``: the same loss words and gradients as
    the C++ and RTL kernels, on the host or on the device.
    """

    kind = "loss"
    node: Loss

    def __init__(
        self,
        node: Node,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
    ):
        super().__init__(node, graph, numerics, counter)
        self.join = JoinBuffer(self, 2, "loss join")
        self.results: list[LossRecord] = []
        feeding = graph.edge_into(node.name, 0)
        self.predictor = feeding.src.node if feeding is not None else "?"  # names a diverged prediction

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        """Every instance completed by ``msgs`` in one vectorised evaluation."""
        check_inputs(self, port, msgs)
        joined = self.join.add(port, msgs)
        if joined is None:
            return []
        tags = joined.tags
        (p_rows, t_rows), offsets = stack_ports(self, joined)
        if self.node.fn != "mse":
            index_rows(self, t_rows, tags, 1)  # class labels must be integers
            labels = np.asarray(t_rows)[:, 0]
            bad = (labels < 0) | (labels >= p_rows.shape[1])
            if np.any(bad):
                tag = tags[int(np.searchsorted(offsets, np.argmax(bad), side="right")) - 1]
                raise self.error(f"target class outside [0, {p_rows.shape[1]}) (tag {tag})")
        evaluate = self._fixed if self.fixed else self._float
        dy = evaluate(tags, p_rows, t_rows, offsets)
        if not train:
            return []
        return [
            *self.emit_rows(0, tags, Direction.BWD, dy, offsets),
            *self.emit_rows(1, tags, Direction.BWD, self.zeros(*t_rows.shape), offsets),
        ]

    def _target(self, t_rows: np.ndarray) -> np.ndarray:
        if self.node.fn != "mse":
            return t_rows.astype(np.int64, copy=True)
        if self.fixed:
            return dequantize(t_rows, self.numerics.data)
        return np.array(t_rows, dtype=np.float64)  # a copy: records outlive the message

    def _fixed(self, tags: list[Tag], p_rows: np.ndarray, t_rows: np.ndarray, offsets: list[int]) -> np.ndarray:
        """``numerics.loss_fixed``: the loss words of every message, and the gradient rows."""
        starts = np.asarray(offsets[:-1], dtype=np.int64)
        out = loss_fixed(self.node.fn, p_rows, t_rows, starts, self.numerics, self.counter, self.site("bwd"))
        p, t = dequantize(p_rows, self.numerics.data), self._target(t_rows)
        rows = np.diff(np.asarray(offsets, dtype=np.int64))
        scale = 1 << loss_frac(self.node.fn, self.numerics.data)
        for k, tag in enumerate(tags):
            lo, hi = offsets[k], offsets[k + 1]
            report = np.array([[out.loss[k], out.metric[k], rows[k]]], dtype=np.int64)
            correct = None if self.node.fn == "mse" else bool(out.metric[k])
            self.results.append(LossRecord(tag, int(out.loss[k]) / scale, p[lo:hi], t[lo:hi], correct, report))
        return out.dy

    def _float(self, tags: list[Tag], p_rows: np.ndarray, t_rows: np.ndarray, offsets: list[int]) -> np.ndarray:
        """Record the loss of every instance (a sum over its rows) and return the gradient rows,
        in float64; row by row, so batching changes nothing."""
        p = np.array(p_rows, dtype=np.float64)
        t = self._target(t_rows)
        starts = offsets[:-1]
        if self.node.fn == "mse":
            diff = p - t
            losses = 0.5 * np.add.reduceat(np.sum(diff * diff, axis=1), starts)
            dy, correct = diff, [None] * len(tags)
        else:
            labels = t[:, 0]
            z = p - p.max(axis=1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            rows = np.arange(p.shape[0])
            losses = -np.add.reduceat(logp[rows, labels], starts)
            dy = np.exp(logp)
            dy[rows, labels] -= 1.0
            right = np.logical_and.reduceat(np.argmax(p, axis=1) == labels, starts)
            correct = [bool(c) for c in right]
        if not np.all(np.isfinite(losses)):  # a diverged run stops here, not epochs later
            k = int(np.argmin(np.isfinite(losses)))
            raise NonFiniteError(f"the loss of instance {tags[k]} is {losses[k]} (the prediction from "
                                 f"node '{self.predictor}' holds NaN or inf): training diverged; "
                                 "lower the learning rate (--lr) or keep gradient clipping on (--clip)",
                                 self.name)
        for k, tag in enumerate(tags):
            lo, hi = offsets[k], offsets[k + 1]
            self.results.append(LossRecord(tag, float(losses[k]), p[lo:hi], t[lo:hi], correct[k]))
        return dy.astype(self.dtype)

    def pending(self) -> int:
        return len(self.join)
