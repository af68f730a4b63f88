"""The model-writing API: ``Graph`` methods that create a node, wire it and return its outputs.

Shapes are checked as you build, so a width mismatch points at the line that caused it; the
same checks run again in ``Graph.validate`` for graphs that arrive as JSON.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import IRError
from .graph import Edge, GraphCore, PortRef
from .limits import LIMITS
from .names import MAX_NAME_LENGTH
from .nodes import (
    Activation,
    Add,
    Aggregate,
    Broadcast,
    Concat,
    Cond,
    DType,
    EdgeSpec,
    Group,
    Isu,
    IsuOp,
    Linear,
    Loss,
    Mul,
    Node,
    Phi,
    Placement,
    Predicate,
    RowSum,
    Sink,
    Source,
    Split,
    Ungroup,
    in_port,
    out_port,
)


@dataclass(frozen=True)
class Value:
    """A handle on one output port while building; ``a + b`` and ``a * b`` build joins."""

    graph: Graph
    node: str
    index: int = 0

    @property
    def spec(self) -> EdgeSpec:
        return self.graph._out_spec(self)

    @property
    def width(self) -> int:
        return self.spec.width

    def __add__(self, other: Value) -> Value:
        return self.graph.add(self, other)

    def __mul__(self, other: Value) -> Value:
        return self.graph.mul(self, other)

    def __repr__(self) -> str:
        return f"<Value {self.node}.out{self.index} {self.spec}>"


class Graph(GraphCore):
    """A model graph with builder methods (see the module docs of ``amp_hls.ir.graph``)."""

    def __init__(self, name: str = "model"):
        super().__init__(name)
        self._built_specs: dict[PortRef, EdgeSpec] = {}
        self._counters: dict[str, int] = {}

    # plumbing -----------------------------------------------------------------------------------
    def _name(self, kind: str, name: str | None) -> str:
        if name is not None:
            return name
        taken = {n.lower() for n in self.nodes}
        while True:
            i = self._counters.get(kind, 0)
            self._counters[kind] = i + 1
            candidate = f"{kind}{i}"
            if candidate.lower() not in taken:
                return candidate

    def _out_spec(self, value: Value) -> EdgeSpec:
        ref = PortRef(value.node, value.index)
        if ref not in self._built_specs:
            raise IRError(f"output out{value.index} has no known spec yet", node=value.node)
        return self._built_specs[ref]

    def _node(self, node: Node, inputs: Sequence[Value | None]) -> list[Value]:
        """Add ``node``, infer its outputs from ``inputs`` (checking shapes), wire it up."""
        for v in inputs:
            if v is not None and v.graph is not self:
                raise IRError("input value belongs to another graph", node=node.name)
        specs = [None if v is None else v.spec for v in inputs]
        outs = node.infer(specs)  # raises before the graph changes
        self._check_fanout(inputs)
        self.add_node(node)
        for i, v in enumerate(inputs):
            if v is not None:
                src = self._fanout(v)
                self.connect(src.node, src.index, node.name, i)
        for i, spec in enumerate(outs):
            self._built_specs[PortRef(node.name, i)] = spec
        return [Value(self, node.name, i) for i in range(len(outs))]

    def _check_fanout(self, inputs: Sequence[Value | None]) -> None:
        """Raise, before the graph changes, if wiring ``inputs`` would overgrow a fan-out."""
        uses = Counter(PortRef(v.node, v.index) for v in inputs if v is not None)
        for src, n in uses.items():
            existing = self.edge_from(src.node, src.index)
            consumer = None if existing is None else self.nodes[existing.dst.node]
            if consumer is None:
                have = 0
            elif isinstance(consumer, Broadcast) and consumer.name in self._auto_broadcasts:
                have = consumer.arity
            else:
                have = 1
            if have + n > LIMITS.max_arity:
                raise IRError(f"used {have + n} times; a value fans out to at most "
                              f"{LIMITS.max_arity} consumers", src.node, out_port(src.index))

    def _fanout(self, value: Value) -> PortRef:
        """The port a new consumer of ``value`` reads from, inserting a Broadcast on reuse."""
        src = PortRef(value.node, value.index)
        existing = self.edge_from(src.node, src.index)
        if existing is None:
            return src
        consumer = self.nodes[existing.dst.node]
        if isinstance(consumer, Broadcast) and consumer.name in self._auto_broadcasts:
            consumer.arity += 1
            consumer.check_attrs()
            ref = PortRef(consumer.name, consumer.arity - 1)
            self._built_specs[ref] = value.spec
            self._specs = None
            return ref
        # keep room for "_fan" and a counter within the name length limit
        stem = value.node[: MAX_NAME_LENGTH - 8]
        bcast = self.add_node(Broadcast(name=self._name(f"{stem}_fan", None), arity=2))
        self._auto_broadcasts.add(bcast.name)
        self._replace_edge(existing, Edge(PortRef(bcast.name, 0), existing.dst))
        self.connect(src.node, src.index, bcast.name, 0)
        for i in range(2):
            self._built_specs[PortRef(bcast.name, i)] = value.spec
        return PortRef(bcast.name, 1)

    # sources and sinks ------------------------------------------------------------------------
    def source(
        self, name: str, width: int, max_rows: int = 1, dtype: DType = "data"
    ) -> Value:
        """An instance input: ``width`` columns, up to ``max_rows`` rows (``index`` for labels)."""
        return self._node(Source(name=name, width=width, max_rows=max_rows, dtype=dtype), [])[0]

    def sink(self, x: Value, name: str | None = None) -> None:
        self._node(Sink(name=self._name("sink", name)), [x])

    def loss(self, pred: Value, target: Value, fn: str = "mse", name: str | None = None) -> None:
        self._node(Loss(name=self._name("loss", name), fn=fn), [pred, target])

    # compute ----------------------------------------------------------------------------------
    def linear(
        self,
        x: Value,
        out_features: int,
        bias: bool = True,
        name: str | None = None,
        parallelism: int = 1,
        placement: Placement | None = None,
    ) -> Value:
        node = Linear(
            name=self._name("linear", name),
            in_features=x.width,
            out_features=out_features,
            bias=bias,
            parallelism=parallelism,
            placement=placement,
        )
        return self._node(node, [x])[0]

    def activation(self, x: Value, fn: str, name: str | None = None) -> Value:
        return self._node(Activation(name=self._name(fn, name), fn=fn), [x])[0]

    def relu(self, x: Value, name: str | None = None) -> Value:
        return self.activation(x, "relu", name)

    def tanh(self, x: Value, name: str | None = None) -> Value:
        return self.activation(x, "tanh", name)

    def sigmoid(self, x: Value, name: str | None = None) -> Value:
        return self.activation(x, "sigmoid", name)

    def add(self, *xs: Value, name: str | None = None) -> Value:
        """Elementwise sum of equal-tag values."""
        return self._node(Add(name=self._name("add", name), arity=len(xs)), xs)[0]

    def mul(self, *xs: Value, name: str | None = None) -> Value:
        return self._node(Mul(name=self._name("mul", name), arity=len(xs)), xs)[0]

    def concat(self, *xs: Value, name: str | None = None) -> Value:
        return self._node(Concat(name=self._name("concat", name), arity=len(xs)), xs)[0]

    def split(self, x: Value, sizes: Sequence[int], name: str | None = None) -> tuple[Value, ...]:
        return tuple(self._node(Split(name=self._name("split", name), sizes=tuple(sizes)), [x]))

    def broadcast(self, x: Value, arity: int = 2, name: str | None = None) -> tuple[Value, ...]:
        return tuple(self._node(Broadcast(name=self._name("broadcast", name), arity=arity), [x]))

    def rowsum(self, x: Value, name: str | None = None) -> Value:
        return self._node(RowSum(name=self._name("rowsum", name)), [x])[0]

    def aggregate(self, x: Value, edges: Value, name: str | None = None) -> Value:
        return self._node(Aggregate(name=self._name("aggregate", name)), [x, edges])[0]

    # control flow -----------------------------------------------------------------------------
    def cond(self, x: Value, predicate: Predicate, name: str | None = None) -> tuple[Value, Value]:
        """Route by ``predicate`` (e.g. ``S[0] < S[1]``): returns ``(when_true, when_false)``."""
        outs = self._node(Cond(name=self._name("cond", name), predicate=predicate), [x])
        return outs[0], outs[1]

    def phi(self, *xs: Value, arity: int | None = None, name: str | None = None) -> Value:
        """Merge streams. Give fewer values than ``arity`` and close loops later with ``feed``."""
        arity = len(xs) if arity is None else arity
        if len(xs) > arity:
            raise IRError(f"{len(xs)} inputs given for arity {arity}", node=name)
        inputs: list[Value | None] = list(xs) + [None] * (arity - len(xs))
        return self._node(Phi(name=self._name("phi", name), arity=arity), inputs)[0]

    def feed(self, phi: Value, x: Value) -> None:
        """Connect ``x`` to the next free input of the Phi node behind ``phi`` (closing a loop)."""
        node = self.node(phi.node)
        if not isinstance(node, Phi):
            raise IRError(f"feed expects a phi output, got a {node.kind}", node=node.name)
        for i in range(node.arity):
            if self.edge_into(node.name, i) is None:
                specs = [self._input_built_spec(node.name, j) for j in range(node.arity)]
                specs[i] = x.spec
                node.infer(specs)
                self._check_fanout([x])
                src = self._fanout(x)
                self.connect(src.node, src.index, node.name, i)
                return
        raise IRError("every input is already connected", node=node.name, port=in_port(node.arity - 1))

    def _input_built_spec(self, node: str, index: int) -> EdgeSpec | None:
        edge = self.edge_into(node, index)
        return None if edge is None else self._built_specs.get(edge.src)

    def isu(self, x: Value, *ops: IsuOp, name: str | None = None) -> Value:
        """Invertible state update, e.g. ``g.isu(h, inc(0))`` for a loop counter."""
        return self._node(Isu(name=self._name("isu", name), ops=tuple(ops)), [x])[0]

    def ungroup(self, x: Value, name: str | None = None) -> Value:
        return self._node(Ungroup(name=self._name("ungroup", name)), [x])[0]

    def group(self, x: Value, max_rows: int, name: str | None = None) -> Value:
        return self._node(Group(name=self._name("group", name), max_rows=max_rows), [x])[0]
