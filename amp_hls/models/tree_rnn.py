"""Tree RNN: bottom-up composition over binary trees by IR control flow alone (docs/models/tree-rnn.md).

A message's state is its tree node's heap position ``(p,)`` (root 0, children ``2p+1``, ``2p+2``).
Each leaf enters through its own source, tagged with its position by the instance; a Phi merges
leaves with composed nodes, a Cond lets the root leave for the classifier, and every other node
climbs with ``parent`` (which pushes the child bit), is routed by that bit to the left or right
input of a Concat, pops the bit there, and meets its sibling at the parent's tag. The Concat
feeds the cell ``tanh(W [h_left; h_right] + b)``, whose output re-enters the Phi as the parent.

Sources send one message per instance, so a tree of ``n < MAX_LEAVES`` words fills the other
leaf sources with padding, tagged ``PAD + j`` (above every real position); a Cond sends it to a
sink before it touches a parameter. See docs/models/tree-rnn.md for the diagram.
"""

from __future__ import annotations

import numpy as np

from ..datasets import Example
from ..datasets.trees import MAX_LEAVES, VOCAB, WORD_INDEX, generate_sentiment_trees, leaves
from ..ir import Graph, S, parent, pop
from .inputs import Inputs
from .zoo import ModelEntry

PAD = 0x8000  # padding leaf j carries state (PAD + j,): above every heap position of depth <= 14


def leaf_source(j: int) -> str:
    """The source of a tree's ``j``-th word (left to right); the names the instance fills."""
    return f"leaf{j}"


def build_tree_rnn(
    vocab: int = len(VOCAB), hidden: int = 32, classes: int = 2, max_leaves: int = MAX_LEAVES
) -> Graph:
    """Leaf sources -> drop padding -> embed -> [root? exit : climb, pair with sibling, compose]."""
    g = Graph("tree_rnn")
    words = g.phi(*(g.source(leaf_source(j), width=vocab) for j in range(max_leaves)), name="words")
    padding, real = g.cond(words, S[0] >= PAD, name="is_padding")
    g.sink(padding, name="padding")
    leaf = g.tanh(g.linear(real, hidden, name="embed"), name="embed_act")
    node = g.phi(leaf, arity=2, name="node")
    root, inner = g.cond(node, S[0] == 0, name="at_root")
    left, right = g.cond(g.isu(inner, parent(0), name="climb"), S[1] == 0, name="side")
    pair = g.concat(g.isu(left, pop(0), name="from_left"), g.isu(right, pop(1), name="from_right"),
                    name="pair")
    g.feed(node, g.tanh(g.linear(pair, hidden, name="compose"), name="compose_act"))
    logits = g.linear(root, classes, name="head")
    g.loss(logits, g.source("label", width=1, dtype="index"), "softmax_ce", name="xent")
    return g.validate()  # type: ignore[return-value]


def _leaf_sources(graph: Graph) -> list[str]:
    """The graph's leaf sources in word order: ``leaf0``, ``leaf1`` ... as far as they go."""
    names = []
    while leaf_source(len(names)) in graph.nodes:
        names.append(leaf_source(len(names)))
    return names


def tree_rnn_inputs(graph: Graph, example: Example) -> Inputs:
    """One tree as messages: each word one-hot at its heap position, padding, the label at the root."""
    names = _leaf_sources(graph)
    words = leaves(example.data)
    if len(words) > len(names):
        raise ValueError(f"a tree of {len(words)} words does not fit {len(names)} leaf sources")
    rows = np.zeros((len(names), 1, graph.node(names[0]).width))  # one (1, vocab) row per source
    inputs: Inputs = {}
    for j, name in enumerate(names):
        if j < len(words):
            position, word = words[j]
            if position >= PAD:
                raise ValueError(f"{word!r} at heap position {position}: the tree is deeper than 14")
            rows[j, 0, WORD_INDEX[word]] = 1.0
            inputs[name] = ((position,), rows[j])
        else:
            inputs[name] = ((PAD + j,), rows[j])
    inputs["label"] = ((0,), np.array([[example.label]]))
    return inputs


ENTRIES = [
    ModelEntry(
        "tree-rnn",
        "tree RNN composing bottom-up by tag joins and Isu(parent) over generated sentiment trees",
        build_tree_rnn,
        lambda seed: generate_sentiment_trees(seed=seed),
        tree_rnn_inputs,
        target=0.93,
        defaults={"mak": 16, "muf": 8, "lr": 2e-3, "epochs": 20},
    )
]
