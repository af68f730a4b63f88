"""The AMPNet-style IR: nodes, graphs, the builder, validation and JSON (docs/contracts.md, IR)."""

from .builder import Graph, Value
from .graph import Edge, GraphCore, PortRef
from .limits import LIMITS, Limits
from .names import check_identifier
from .nodes import (
    ACTIVATIONS,
    LANES,
    LOSSES,
    NODE_KINDS,
    OUTPUTS_PER_STEP,
    Activation,
    Add,
    Aggregate,
    Broadcast,
    Concat,
    Cond,
    EdgeSpec,
    Group,
    Isu,
    IsuOp,
    Linear,
    Loss,
    Mul,
    Node,
    Phi,
    Predicate,
    RowSum,
    S,
    Sink,
    Source,
    Split,
    Ungroup,
    dec,
    inc,
    node_lanes,
    parent,
    pop,
    push,
)
from .serialize import dumps, graph_from_json, load, loads, save

__all__ = [
    "LANES",
    "ACTIVATIONS", "LIMITS", "LOSSES", "NODE_KINDS", "OUTPUTS_PER_STEP", "Activation", "Add", "Aggregate",
    "Broadcast", "Concat", "Cond", "Edge", "EdgeSpec", "Graph", "GraphCore", "Group", "Isu",
    "IsuOp", "Limits", "Linear", "Loss", "Mul", "Node",
    "node_lanes", "Phi", "PortRef", "Predicate", "RowSum",
    "S", "Sink", "Source", "Split", "Ungroup", "Value", "check_identifier", "dec", "dumps",
    "graph_from_json", "inc", "load", "loads", "parent", "pop", "push", "save",
]
