"""Which worker thread owns which node: the sources go to worker 0 (it admits instances), the
rest in runs of consecutive nodes (graph order) whose largest cost is as small as it can be. A
node's cost is the time the native runtime measured spending on it (``NativeRun.node_ticks``), or
before anything was measured a static model: a fixed cost per message, plus multiply-accumulates
per row for a Linear, payload elements for the others."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import GraphCore
from ..ir.nodes import Linear, Source

# A message's fixed cost through any kernel (taking it from its inbox, the tag cache, the emitted
# message) in the units of node_cost, a multiply-accumulate: list-rnn's Isu, 64 payload elements,
# took 0.23 us a message and its Linear, 4,032 products, 1.27 us (timing counters, one thread).
MESSAGE_COST = 700


def node_cost(graph: GraphCore, name: str) -> int:
    """Work per message through ``name``, forward and backward: the fixed cost, and a Linear's
    three products per row, else its payload widths (the static model: it knows nothing of how
    many messages and rows a node takes per instance)."""
    node = graph.nodes[name]
    if isinstance(node, Linear):
        return MESSAGE_COST + 3 * node.in_features * node.out_features
    widths = [graph.input_spec(name, i).width for i in range(node.n_inputs)]
    widths += [graph.spec(name, i).width for i in range(node.n_outputs)]
    return MESSAGE_COST + sum(widths)


def partition(graph: GraphCore, threads: int, costs: Sequence[float] | None = None) -> list[int]:
    """The owning worker of each node, in graph order: the sources worker 0's, the other nodes
    cut into ``threads`` runs of consecutive nodes with the smallest largest load (worker 0's
    counting its sources). ``costs`` per node in graph order (any unit: the measured time
    per node), else, or when all are zero, the static ``node_cost``. Consecutive nodes pass each
    other most of the messages, so runs keep most hand-overs inside one worker (list-rnn's loop
    crosses between the two workers twice an iteration, against four times when the nodes are
    dealt out heaviest first)."""
    names = list(graph.nodes)
    if costs is None or not sum(costs) > 0:
        costs = [node_cost(graph, n) for n in names]
    if len(costs) != len(names):
        raise ValueError(f"{len(costs)} costs for {len(names)} nodes")
    is_source = [isinstance(graph.nodes[n], Source) for n in names]
    base = sum(c for c, s in zip(costs, is_source) if s)
    runs = iter(balanced_runs([c for c, s in zip(costs, is_source) if not s], threads, base))
    return [0 if s else next(runs) for s in is_source]


def balanced_runs(costs: Sequence[float], threads: int, base: float = 0.0) -> list[int]:
    """The worker of each item: ``threads`` runs of consecutive items (each non-empty while
    there are items enough) whose largest load is the least possible, worker 0 starting at
    ``base``; among equal ones the earliest cuts. Dynamic programming over the cut points
    (items times items times threads: some hundred nodes, a few threads)."""
    m, t = len(costs), max(1, min(threads, len(costs)))
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    # best[j][i]: the least largest load of items 0..i-1 on workers 0..j, cut[j][i] its last cut
    best = [[base + prefix[i] for i in range(m + 1)]]
    cut = [[0] * (m + 1)]
    for j in range(1, t):
        row, where = [float("inf")] * (m + 1), [0] * (m + 1)
        for i in range(j + 1, m + 1):
            for k in range(j, i):
                load = max(best[j - 1][k], prefix[i] - prefix[k])
                if load < row[i]:
                    row[i], where[i] = load, k
        best.append(row)
        cut.append(where)
    owner, i = [0] * m, m
    for j in range(t - 1, 0, -1):
        k = cut[j][i]
        owner[k:i] = [j] * (i - k)
        i = k
    return owner
