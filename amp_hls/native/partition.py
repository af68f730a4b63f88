"""Which worker thread owns which node: the sources go to worker 0 (it admits instances), the
rest greedily to the least-loaded worker, heaviest first (multiply-accumulates per row for a
Linear, payload elements for the others)."""

from __future__ import annotations

from ..ir import GraphCore
from ..ir.nodes import Linear, Source


def node_cost(graph: GraphCore, name: str) -> int:
    """Work per row through ``name``, forward and backward: a Linear's three products, else its widths."""
    node = graph.nodes[name]
    if isinstance(node, Linear):
        return 3 * node.in_features * node.out_features
    widths = [graph.input_spec(name, i).width for i in range(node.n_inputs)]
    widths += [graph.spec(name, i).width for i in range(node.n_outputs)]
    return sum(widths)


def partition(graph: GraphCore, threads: int) -> list[int]:
    """The owning worker of each node, in graph order."""
    names = list(graph.nodes)
    owner = {n: 0 for n in names if isinstance(graph.nodes[n], Source)}
    load = [0] * threads
    for n in owner:
        load[0] += node_cost(graph, n)
    for n in sorted((n for n in names if n not in owner), key=lambda n: -node_cost(graph, n)):
        w = load.index(min(load))
        owner[n] = w
        load[w] += node_cost(graph, n)
    return [owner[n] for n in names]
