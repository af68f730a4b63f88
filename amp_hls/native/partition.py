"""Which worker thread owns which node: the sources go to worker 0 (it admits instances), the
rest in runs of consecutive nodes of about equal cost (a fixed cost per message, plus
multiply-accumulates per row for a Linear, payload elements for the others)."""

from __future__ import annotations

from ..ir import GraphCore
from ..ir.nodes import Linear, Source

# A message's fixed cost through any kernel (taking it from its inbox, the tag cache, the emitted
# message) in the units of node_cost, a multiply-accumulate: list-rnn's Isu, 64 payload elements,
# took 0.23 us a message and its Linear, 4,032 products, 1.27 us (timing counters, one thread).
MESSAGE_COST = 700


def node_cost(graph: GraphCore, name: str) -> int:
    """Work per message through ``name``, forward and backward: the fixed cost, and a Linear's
    three products per row, else its payload widths."""
    node = graph.nodes[name]
    if isinstance(node, Linear):
        return MESSAGE_COST + 3 * node.in_features * node.out_features
    widths = [graph.input_spec(name, i).width for i in range(node.n_inputs)]
    widths += [graph.spec(name, i).width for i in range(node.n_outputs)]
    return MESSAGE_COST + sum(widths)


def partition(graph: GraphCore, threads: int) -> list[int]:
    """The owning worker of each node, in graph order: the non-source nodes cut into ``threads``
    runs of consecutive nodes of about equal cost. Consecutive nodes pass each other most of the
    messages, so runs keep most hand-overs inside one worker (list-rnn's loop crosses between the
    two workers twice an iteration, against four times when the nodes are dealt out heaviest first)."""
    names = list(graph.nodes)
    owner = {n: 0 for n in names if isinstance(graph.nodes[n], Source)}
    total = sum(node_cost(graph, n) for n in names)
    done = sum(node_cost(graph, n) for n in owner)  # worker 0's share starts with the sources
    for n in names:
        if n in owner:
            continue
        cost = node_cost(graph, n)
        owner[n] = min(threads - 1, int((done + cost / 2) * threads // total))  # where its middle falls
        done += cost
    return [owner[n] for n in names]
