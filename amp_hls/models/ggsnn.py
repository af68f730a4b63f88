"""GGSNN: a gated graph network over node states (rows = nodes), built from IR nodes alone.

One propagation step (``add_ggsnn_step``), for node states ``h`` (n x H) and K typed edge lists::

    a_k = Aggregate(h, edges_k)                  # sum of neighbours over type-k edges, k < K
    m   = Linear(Concat(a_1 .. a_K))             # = sum_k W_k a_k: per-type transforms, by linearity
    z, f, r = Split(sigmoid(Linear(Concat(m, h))))
    c   = tanh(Linear(Concat(m, r * h)))         # candidate
    h'  = f * h + z * c                          # gated update, untied gates (see below)

The steps share their weights: the step is built *once* inside a loop (``add_ggsnn_propagation``)
that the IR's control flow unrolls at run time, ``Phi -> step -> Isu(t+1) -> Cond(t < T)``, as
AMPNet does. The edge lists ride along in loops of their own (``Phi -> Isu -> Cond``) so that
every step's Aggregate meets the edges with its own tag ``(t,)``; at the exit they end in a Sink.

**Gates.** A GRU's update is ``(1 - z) * h + z * c``. The catalogue has no subtraction and no
constant source, so ``1 - z`` cannot be formed from ``z``; instead the keep gate ``f`` has its
own weights (``f = sigmoid(W_f [m, h])``, trained, not tied to ``1 - z``), the "untied gates"
variant (an LSTM-like forget/input pair whose cell is the hidden state). ``docs/models/ggsnn.md``
gives the one-line catalogue addition that would make the exact GRU possible.

**Empty edge types.** A message has at least one row, but a molecule may have no double bond.
``ggsnn_feeds`` therefore appends one *null node* to every graph: zero features except a flag
column, no edges to the real nodes, and a self-loop of every edge type. It keeps every edge
list non-empty without touching the real nodes; its own state depends on the weights only, so
its share of the readout is a learned constant (a bias).

Readout (``add_gated_readout``): ``RowSum(sigmoid(i(h_T)) * tanh(j(h_T)))``, then an MLP head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..datasets import Example
from ..datasets.babi import (
    BABI15_CLASSES,
    BABI15_EDGE_TYPES,
    BABI15_FEATURES,
    BABI19_CLASSES,
    BABI19_EDGE_TYPES,
    BABI19_FEATURES,
    GraphData,
    generate_babi15,
    generate_babi19,
)
from ..datasets.qm9 import (
    QM9_EDGE_TYPES,
    QM9_FEATURES,
    QM9_GAP_STD_EV,
    QM9_MAX_EDGES,
    QM9_MAX_NODES,
    load_qm9_splits,
)
from ..errors import AmpHlsError
from ..ir import Graph, S, Value, inc
from .spec import Feed, ModelSpec, label_row

PROP = "prop"  # name prefix of the propagation loop; ``ggsnn_steps`` reads T from its Cond


def add_ggsnn_step(g: Graph, h: Value, edges: Sequence[Value], hidden: int, prefix: str = PROP) -> Value:
    """One gated propagation step over node states ``h``; returns the new states (same tag)."""
    if not edges:
        raise AmpHlsError("a GGSNN step needs at least one edge type")
    msgs = [g.aggregate(h, e, name=f"{prefix}_agg{k}") for k, e in enumerate(edges)]
    joined = g.concat(*msgs, name=f"{prefix}_msgs") if len(msgs) > 1 else msgs[0]
    # no bias: the gate and candidate Linears that read m have their own
    m = g.linear(joined, hidden, bias=False, name=f"{prefix}_msg")
    gates = g.sigmoid(g.linear(g.concat(m, h, name=f"{prefix}_gate_in"), 3 * hidden,
                               name=f"{prefix}_gates"), name=f"{prefix}_gates_act")
    z, f, r = g.split(gates, (hidden, hidden, hidden), name=f"{prefix}_zfr")
    reset = g.mul(r, h, name=f"{prefix}_reset")
    cand = g.tanh(g.linear(g.concat(m, reset, name=f"{prefix}_cand_in"), hidden,
                           name=f"{prefix}_cand"), name=f"{prefix}_cand_act")
    keep = g.mul(f, h, name=f"{prefix}_keep")
    write = g.mul(z, cand, name=f"{prefix}_write")
    return g.add(keep, write, name=f"{prefix}_update")


def add_ggsnn_propagation(
    g: Graph, h0: Value, edges: Sequence[Value], hidden: int, steps: int, prefix: str = PROP
) -> Value:
    """``steps`` weight-shared propagation steps as an IR loop over the state word ``S[0]``.

    ``h0`` and every edge list must enter with state ``(0,)``; the result leaves with state
    ``(steps,)``. Nodes: one Phi/Isu/Cond for the states, and one Phi/Isu/Cond/Sink per edge type.
    """
    if not 1 <= steps <= 255:
        raise AmpHlsError(f"steps must be in [1, 255], got {steps}")
    h = g.phi(h0, arity=2, name=f"{prefix}_h")
    looped = [g.phi(e, arity=2, name=f"{prefix}_e{k}") for k, e in enumerate(edges)]
    h_next = add_ggsnn_step(g, h, looped, hidden, prefix)
    again, done = g.cond(g.isu(h_next, inc(0), name=f"{prefix}_next"), S[0] < steps, name=f"{prefix}_more")
    g.feed(h, again)
    for k, e in enumerate(looped):
        e_again, e_done = g.cond(g.isu(e, inc(0), name=f"{prefix}_e{k}_next"), S[0] < steps,
                                 name=f"{prefix}_e{k}_more")
        g.feed(e, e_again)
        g.sink(e_done, name=f"{prefix}_e{k}_done")
    return done


def add_gated_readout(g: Graph, h: Value, width: int, prefix: str = "readout") -> Value:
    """Graph-level vector ``sum_v sigmoid(i(h_v)) * tanh(j(h_v))`` (one row)."""
    gate, value = g.split(g.linear(h, 2 * width, name=f"{prefix}_ij"), (width, width), name=f"{prefix}_split")
    return g.rowsum(g.mul(g.sigmoid(gate, name=f"{prefix}_gate"), g.tanh(value, name=f"{prefix}_value"),
                          name=f"{prefix}_gated"), name=f"{prefix}_sum")


def build_ggsnn(
    features: int,
    edge_types: int,
    outputs: int,
    loss: str = "softmax_ce",
    hidden: int = 32,
    steps: int = 2,
    readout: int = 32,
    max_nodes: int = 16,
    max_edges: int = 64,
    name: str = "ggsnn",
) -> Graph:
    """The whole model: embed -> ``steps`` gated steps -> gated sum readout -> MLP head -> loss.

    ``features``/``max_nodes``/``max_edges`` describe the data *before* ``ggsnn_feeds`` adds the
    null node (one more feature column, one more row, one more edge per type). ``loss`` is
    ``softmax_ce`` (``outputs`` classes, index target) or ``mse`` (``outputs`` values).
    """
    g = Graph(name)
    x = g.source("nodes", width=features + 1, max_rows=max_nodes + 1)
    edges = [g.source(f"edges{k}", width=2, max_rows=max_edges + 1, dtype="index") for k in range(edge_types)]
    h0 = g.tanh(g.linear(x, hidden, name="embed"), name="embed_act")
    h_final = add_ggsnn_propagation(g, h0, edges, hidden, steps)
    r = add_gated_readout(g, h_final, readout)
    y = g.linear(g.tanh(g.linear(r, readout, name="head1"), name="head1_act"), outputs, name="head2")
    target = g.source("target", width=1 if loss == "softmax_ce" else outputs,
                      dtype="index" if loss == "softmax_ce" else "data")
    g.loss(y, target, loss, name="loss")
    return g.validate()  # type: ignore[return-value]


def ggsnn_steps(graph: Graph) -> int:
    """T, read back from the propagation loop's Cond (``S[0] < T``)."""
    return int(graph.node(f"{PROP}_more").predicate.rhs_const)  # type: ignore[attr-defined]


def ggsnn_feeds(edge_types: int, steps: int, classify: bool) -> dict[str, Feed]:
    """One graph as messages, with the null node appended (see the module docs): node states
    and edge lists enter the loop at state ``(0,)``, the target waits at its exit ``(steps,)``;
    a class label (``classify``) or the regression target."""

    def nodes(example: Example) -> np.ndarray:
        data: GraphData = example.data
        n, f = data.nodes.shape
        out = np.zeros((n + 1, f + 1))
        out[:n, :f] = data.nodes
        out[n, f] = 1.0
        return out

    def edges(k: int) -> Feed:
        def payload(example: Example) -> np.ndarray:
            data: GraphData = example.data
            null_loop = np.array([[data.n_nodes, data.n_nodes]], dtype=np.int64)
            return np.concatenate([np.asarray(data.edges[k], dtype=np.int64).reshape(-1, 2), null_loop])

        return Feed(payload, state=(0,))

    def target(example: Example) -> np.ndarray:
        return label_row(example) if classify else np.array([[example.data.target]])

    return {"nodes": Feed(nodes, state=(0,)), **{f"edges{k}": edges(k) for k in range(edge_types)},
            "target": Feed(target, state=(steps,))}


def ggsnn_spec(name: str, graph: Mapping[str, Any], **fields: Any) -> ModelSpec:
    """A GGSNN model: ``build_ggsnn(**graph)`` with its feeds; ``fields`` are the rest of the
    ``ModelSpec`` (data, target, defaults, ...)."""
    loss = graph.get("loss", "softmax_ce")
    feeds = ggsnn_feeds(graph["edge_types"], graph.get("steps", 2), loss == "softmax_ce")
    return ModelSpec(name, partial(build_ggsnn, **graph), feeds, **fields)


# --- the zoo's GGSNN entries -------------------------------------------------------------------


BABI15_GRAPH = dict(features=BABI15_FEATURES, edge_types=len(BABI15_EDGE_TYPES), outputs=BABI15_CLASSES,
                    hidden=16, steps=2, readout=16, max_nodes=8, max_edges=4, name="ggsnn_babi15")
BABI19_GRAPH = dict(features=BABI19_FEATURES, edge_types=len(BABI19_EDGE_TYPES), outputs=BABI19_CLASSES,
                    hidden=24, steps=2, readout=32, max_nodes=6, max_edges=5, name="ggsnn_babi19")
QM9_GRAPH = dict(features=QM9_FEATURES, edge_types=len(QM9_EDGE_TYPES), outputs=1, loss="mse", hidden=32,
                 steps=3, readout=32, max_nodes=QM9_MAX_NODES, max_edges=QM9_MAX_EDGES, name="ggsnn_qm9")

ENTRIES = [
    ggsnn_spec(
        "ggsnn-babi15", BABI15_GRAPH,
        data=lambda seed: generate_babi15(seed=seed),
        description="gated graph network (weight-shared loop of Aggregate + gated update) on generated "
        "bAbI-15-like deduction graphs; predicts the feared species",
        target=0.99,
        defaults={"mak": 16, "muf": 8, "lr": 1e-2, "epochs": 20},
    ),
    ggsnn_spec(
        "ggsnn-babi19", BABI19_GRAPH,
        data=lambda seed: generate_babi19(seed=seed),
        description="gated graph network on generated bAbI-19-like path-finding graphs; predicts the two "
        "directions from the start to the end location",
        target=0.99,
        defaults={"mak": 16, "muf": 8, "lr": 1e-2, "epochs": 20},
    ),
    ggsnn_spec(
        "ggsnn-qm9", QM9_GRAPH,
        data=lambda seed: load_qm9_splits(seed=seed),
        sized_data=lambda seed, size: load_qm9_splits(seed=seed, n=size),
        description="gated graph network on real QM9 molecules (heavy atoms, bond types as edge types); "
        "regresses the HOMO-LUMO gap (needs the qm9 extra)",
        target=0.30,  # validation MAE in eV (metric_scale converts); --no-target runs every epoch
        defaults={"mak": 16, "muf": 8, "lr": 1e-3, "epochs": 20},
        metric="mae",
        metric_scale=QM9_GAP_STD_EV,
        metric_unit="eV",
    ),
]
