"""A graph model of your own: does a red node touch a blue one? (docs/your-model.md, part 2)

Each example is one JSON line of data/graphs.jsonl: ``nodes`` (one row per node, a one-hot
colour: red, green, blue), ``edges`` (``[src, dst]`` pairs, both directions of every edge),
``label`` and ``split``. One message-passing step: every node sums its neighbours' embeddings
(Aggregate over the edge list the instance carries), combines them with its own, and a sum over
the nodes (RowSum) feeds the classifier. No loop, so every source enters with the empty state.

    amp-hls train examples/graph_colors.py --epochs 10
"""

from pathlib import Path

import numpy as np

import amp_hls as amp

HERE = Path(__file__).parent
COLOURS = 3
HIDDEN = 8
MAX_NODES = 6
MAX_EDGES = 12  # directed rows: both directions of at most 6 edges


def build() -> amp.Graph:
    g = amp.Graph("graph_colors")
    h = g.tanh(g.linear(g.source("nodes", width=COLOURS, max_rows=MAX_NODES), HIDDEN, name="embed"), name="embed_act")
    edges = g.source("edges", width=2, max_rows=MAX_EDGES, dtype="index")
    near = g.aggregate(h, edges, name="neighbours")  # row i: the sum over edges j -> i of h_j
    z = g.tanh(g.linear(g.concat(h, near, name="both"), HIDDEN, name="combine"), name="combine_act")
    g.loss(g.linear(g.rowsum(z, name="readout"), 2, name="head"), g.source("label", width=1, dtype="index"),
           "softmax_ce", name="xent")
    return g.validate()


def model() -> amp.ModelSpec:
    return amp.ModelSpec(
        "graph-colors",
        build,
        {
            "nodes": amp.Feed(lambda example: example.data["nodes"], state=()),
            "edges": amp.Feed(lambda example: example.data["edges"].astype(np.int64), state=()),
            "label": amp.Feed(amp.label_row, state=()),
        },
        data=lambda seed: amp.load_dataset(HERE / "data" / "graphs.jsonl", seed),
        description="does a red node have a blue neighbour? (examples/graph_colors.py)",
        target=0.95,
        defaults={"mak": 8, "muf": 4, "lr": 1e-2, "epochs": 20},
    )
