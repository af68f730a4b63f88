"""The graph: named nodes joined by edges from output ports to input ports.

``Graph`` is both the container every executor reads and, through ``Builder``, the API a
researcher writes models with::

    g = Graph("mlp")
    x = g.source("x", width=64)
    h = g.tanh(g.linear(x, 32))
    g.loss(g.linear(h, 10), g.source("label", width=1, dtype="index"), "softmax_ce")
    g.validate()

Every output port feeds exactly one input port. Using a value twice in the builder inserts a
``Broadcast`` node for you (its backward sums the gradients), so fan-out is always explicit in the IR.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import IRError
from .limits import LIMITS
from .names import check_generated_names, check_identifier, generated_names
from .nodes import EdgeSpec, Node, in_port, out_port


@dataclass(frozen=True, order=True)
class PortRef:
    """One port of one node: ``index`` counts inputs or outputs, whichever the context says."""

    node: str
    index: int


@dataclass(frozen=True)
class Edge:
    src: PortRef  # an output port
    dst: PortRef  # an input port

    def __str__(self) -> str:
        return f"{self.src.node}.{out_port(self.src.index)} -> {self.dst.node}.{in_port(self.dst.index)}"


class GraphCore:
    """Storage and queries; no opinions about how the graph was built."""

    def __init__(self, name: str = "model"):
        self.name = check_identifier(name, "graph name")
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []
        self._specs: dict[PortRef, EdgeSpec] | None = None
        self._auto_broadcasts: set[str] = set()  # fan-out nodes the builder inserted

    # construction -----------------------------------------------------------------------------
    def add_node(self, node: Node) -> Node:
        """Add ``node``; its name must be a safe identifier not used before (in any case), whose
        generated names meet no other's, and the graph must have room for it."""
        check_identifier(node.name, "node name", node=node.name)
        if len(self.nodes) >= LIMITS.max_nodes:
            raise IRError(f"graph {self.name!r} already has {len(self.nodes)} nodes, the maximum "
                          f"{LIMITS.max_nodes}", node=node.name)
        lowered = {n.lower() for n in self.nodes}
        if node.name.lower() in lowered:
            raise IRError("a node with this name already exists", node=node.name)
        taken: dict[str, str] = {}
        for name in self.nodes:
            taken.update(dict.fromkeys(generated_names(name), name))
        check_generated_names(node.name, taken)
        node.check_attrs()
        self.nodes[node.name] = node
        self._specs = None
        return node

    def connect(self, src: str, src_index: int, dst: str, dst_index: int) -> Edge:
        """Join output ``src_index`` of ``src`` to input ``dst_index`` of ``dst``."""
        edge = Edge(PortRef(src, src_index), PortRef(dst, dst_index))
        self.edges.append(edge)
        self._specs = None
        return edge

    def _replace_edge(self, old: Edge, new: Edge) -> None:
        self.edges[self.edges.index(old)] = new
        self._specs = None

    # queries ----------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise IRError(f"no node named {name!r} in graph {self.name!r}") from None

    def edge_into(self, node: str, index: int) -> Edge | None:
        """The edge feeding input ``index`` of ``node`` (the first one, if doubly connected)."""
        for e in self.edges:
            if e.dst == PortRef(node, index):
                return e
        return None

    def edge_from(self, node: str, index: int) -> Edge | None:
        """The edge leaving output ``index`` of ``node`` (the first one, if doubly connected)."""
        for e in self.edges:
            if e.src == PortRef(node, index):
                return e
        return None

    def nodes_of(self, kind: type[Node]) -> Iterator[Node]:
        return (n for n in self.nodes.values() if isinstance(n, kind))

    # validation and specs ---------------------------------------------------------------------
    def validate(self) -> GraphCore:
        """Check every IR rule (raises ``IRError`` naming node and port); returns the graph."""
        from .validate import validate

        self._specs = validate(self)
        return self

    def spec(self, node: str, out_index: int = 0) -> EdgeSpec:
        """The spec of the edge leaving output ``out_index`` of ``node`` (validates if needed)."""
        if self._specs is None:
            self.validate()
        assert self._specs is not None
        return self._specs[PortRef(node, out_index)]

    def input_spec(self, node: str, in_index: int) -> EdgeSpec:
        edge = self.edge_into(node, in_index)
        if edge is None:
            raise IRError("input is not connected", node=node, port=in_port(in_index))
        return self.spec(edge.src.node, edge.src.index)

    # presentation -----------------------------------------------------------------------------
    def summary(self) -> str:
        from .summary import summary

        return summary(self)

    def to_json(self) -> dict:
        from .serialize import graph_to_json

        return graph_to_json(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.nodes)} nodes, {len(self.edges)} edges>"
