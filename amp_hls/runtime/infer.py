"""Trained weights at work: evaluation and predictions, forward only (``amp-hls evaluate`` and
``amp-hls predict``, ``amp_hls.evaluate`` and ``amp_hls.predict``).

A prediction is what reaches a loss's prediction input (``in0``). ``predict`` runs the graph
without its losses and the sources that feed only their targets, so examples need no labels:
those messages leave the engine, and are the predictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Contents
from ..datasets import Example
from ..errors import AmpHlsError
from ..ir import GraphCore, Loss, Source
from ..kernels import ParamKernel
from ..message import Direction
from ..models import ModelSpec
from ..numerics import FLOAT32, NumericConfig, dequantize
from .check import check_examples
from .engine import Engine
from .trainer import Evaluation, TrainConfig, drain_losses

WINDOW = 1024  # instances in flight in a forward-only pass


@dataclass(frozen=True)
class Prediction:
    """One example's predictions: per loss node, the rows its prediction input received (real
    values: logits for ``softmax_ce``, values for ``mse``), and for ``softmax_ce`` the classes."""

    outputs: dict[str, np.ndarray]
    classes: dict[str, np.ndarray] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {name: rows.tolist() for name, rows in self.outputs.items()}
        doc.update({f"{name}_class": c.tolist() for name, c in self.classes.items()})
        return doc


class Predictor:
    """A model with fixed parameters: ``evaluate`` scores examples, ``predict`` answers them."""

    def __init__(self, spec: ModelSpec, params: Mapping[str, Mapping[str, np.ndarray]],
                 numerics: NumericConfig = FLOAT32, graph: GraphCore | None = None):
        self.spec = spec
        self.graph = graph if graph is not None else spec.build()
        self.numerics = numerics
        self.params = {n: {t: np.asarray(v) for t, v in p.items()} for n, p in params.items()}
        wanted = {n for n, node in self.graph.nodes.items() if node.param_shapes()}
        if set(self.params) != wanted:
            raise AmpHlsError(f"model {spec.name!r}: parameters for {sorted(self.params)}, but its parameter "
                              f"nodes are {sorted(wanted)}")

    @classmethod
    def from_checkpoint(cls, spec: ModelSpec, path: str | Path, graph: GraphCore | None = None) -> Predictor:
        """The parameters of a training checkpoint (``--checkpoint``: the cpu trainer's, a device
        trainer's or the distributed server's) in the numerics it trained in."""
        from .restore import read_params

        contents = Contents(path)
        meta = contents.meta
        if meta.get("model") != spec.name:
            raise AmpHlsError(f"checkpoint {path} is for model {meta.get('model')!r}, not {spec.name!r}")
        graph = graph if graph is not None else spec.build()
        shapes = {name: dict(node.param_shapes()) for name, node in graph.nodes.items() if node.param_shapes()}
        params = read_params(contents, shapes)  # each of the right shape, finite
        if isinstance(meta.get("config"), dict):
            numerics = TrainConfig.from_json(meta["config"]).numeric_config()
        else:  # a device trainer's checkpoint: its device computed in fixed point
            numerics = NumericConfig("fixed") if meta.get("backend") not in (None, "cpu") else FLOAT32
        return cls(spec, params, numerics, graph)

    def _engine(self, members: set[str] | None = None) -> Engine:
        engine = Engine(self.graph, self.numerics, train=False, max_batch=WINDOW, members=members)
        for name, kernel in engine.kernels.items():
            if isinstance(kernel, ParamKernel):
                kernel.set_params(self.params[name])  # checks every shape
        return engine

    def evaluate(self, examples: Sequence[Example]) -> Evaluation:
        """Mean loss and the model's metric over ``examples`` (checked first, as before training)."""
        check_examples(self.spec, self.graph, {"evaluated": examples})
        engine = self._engine()
        self._run(engine, examples, None)
        loss, metric = self.spec.score(drain_losses(engine))
        return Evaluation(loss, metric, len(examples))

    def predict(self, examples: Sequence[Example]) -> list[Prediction]:
        """What the model predicts for each of ``examples``, in order (labels are not read)."""
        losses = [n for n in self.graph.nodes.values() if isinstance(n, Loss)]
        targets = set()
        for loss in losses:
            edge = self.graph.edge_into(loss.name, 1)
            if edge is not None and isinstance(self.graph.nodes[edge.src.node], Source):
                targets.add(edge.src.node)
        members = set(self.graph.nodes) - {n.name for n in losses} - targets
        sources = [n for n in self.graph.nodes if n in members and isinstance(self.graph.nodes[n], Source)]
        engine = self._engine(members)
        rows: dict[int, dict[str, list[np.ndarray]]] = {i: {} for i in range(len(examples))}

        def collect() -> None:
            for edge, msg in engine.take_outbox():
                if edge.dst.node in members or edge.dst.index != 0 or msg.direction is not Direction.FWD:
                    continue  # a loss's target side
                payload = dequantize(msg.payload, self.numerics.data) if self.numerics.fixed else msg.payload
                rows[msg.tag.key].setdefault(edge.dst.node, []).append(np.asarray(payload, dtype=np.float64))

        self._run(engine, examples, sources, collect)
        out = []
        for i in range(len(examples)):
            outputs = {name: np.vstack(parts) for name, parts in rows[i].items()}
            classes = {loss.name: np.argmax(outputs[loss.name], axis=1) for loss in losses
                       if loss.fn == "softmax_ce" and loss.name in outputs}
            out.append(Prediction(outputs, classes))
        return out

    def _run(self, engine: Engine, examples: Sequence[Example], sources: Sequence[str] | None,
             collect: Any = None) -> None:
        """Every example through ``engine``, ``WINDOW`` in flight, keyed by its index."""
        i = 0
        while i < len(examples) or engine.active_keys:
            while i < len(examples) and engine.active_keys < WINDOW:
                engine.inject(i, self.spec.inputs(examples[i], sources))
                i += 1
            engine.run()
            if collect is not None:
                collect()
