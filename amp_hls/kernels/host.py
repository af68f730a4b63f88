"""Host-side kernels: Source (instances in), Sink (outputs out) and Loss (the backward's origin)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import NonFiniteError
from ..ir import EdgeSpec, GraphCore, Loss, Node, Source
from ..message import Direction, Message, Tag
from ..numerics import NumericConfig, SaturationCounter, dequantize, quantize
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
    """One evaluated instance: the loss, what was predicted (real-valued) and whether it was right."""

    tag: Tag
    loss: float
    prediction: np.ndarray
    target: np.ndarray
    correct: bool | None


class LossKernel(Kernel):
    """Joins prediction and target; computes in float64 (host side) and emits the gradient.

    Fixed mode dequantizes the prediction (and an mse target), and quantizes the gradient to the
    grads precision, so the device sees the same integers whichever host computed them.
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
        dy = self._evaluate(tags, p_rows, t_rows, offsets)
        if not train:
            return []
        return [
            *self.emit_rows(0, tags, Direction.BWD, dy, offsets),
            *self.emit_rows(1, tags, Direction.BWD, self.zeros(*t_rows.shape), offsets),
        ]

    def _real(self, payload: np.ndarray) -> np.ndarray:
        if self.fixed:
            return dequantize(payload, self.numerics.data)
        return np.array(payload, dtype=np.float64)  # a copy: records outlive the message

    def _evaluate(self, tags: list[Tag], p_rows: np.ndarray, t_rows: np.ndarray, offsets: list[int]) -> np.ndarray:
        """Record the loss of every instance (a sum over its rows) and return the gradient rows
        in the payload format; row by row, so batching changes nothing."""
        p = self._real(p_rows)
        starts = offsets[:-1]
        if self.node.fn == "mse":
            t = self._real(t_rows)
            diff = p - t
            losses = 0.5 * np.add.reduceat(np.sum(diff * diff, axis=1), starts)
            dy, correct = diff, [None] * len(tags)
        else:
            t = t_rows.astype(np.int64, copy=False)
            labels = t[:, 0]
            bad = (labels < 0) | (labels >= p.shape[1])
            if np.any(bad):
                tag = tags[int(np.searchsorted(offsets, np.argmax(bad), side="right")) - 1]
                raise self.error(f"target class outside [0, {p.shape[1]}) (tag {tag})")
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
        if self.fixed:
            return quantize(dy, self.numerics.grads, self.counter, self.site("bwd"))
        return dy.astype(self.dtype)

    def pending(self) -> int:
        return len(self.join)
