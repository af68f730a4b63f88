"""Tree RNN: bottom-up composition over binary trees by IR control flow alone (docs/models/tree-rnn.md).

A message's state is its tree node's heap position ``(p,)`` (root 0, children ``2p+1``, ``2p+2``).
Each leaf enters through its own source, tagged with its position by the instance; a Phi merges
leaves with composed nodes, a Cond lets the root leave for the classifier, and every other node
climbs with ``parent`` (which pushes the child bit), is routed by that bit to the left or right
input of a Concat, pops the bit there, and meets its sibling at the parent's tag. The Concat
feeds the cell ``tanh(W [h_left; h_right] + b)``, whose output re-enters the Phi as the parent.

Sources send one message per instance, so a tree of ``n < MAX_LEAVES`` words fills the other
leaf sources with padding, tagged ``PAD + j`` (above every real position); a Cond sends it to a
sink before it touches a parameter. That Phi and Cond run on the host: only real leaves cross to a
device, and embed, fed by nodes whose gradient reaches nothing but sources, runs no dx
(``design.skips_dx``). See docs/models/tree-rnn.md for the diagram.
"""

from __future__ import annotations

import functools
from functools import partial

import numpy as np

from ..datasets import Example
from ..datasets.trees import MAX_LEAVES, VOCAB, WORD_INDEX, Tree, generate_sentiment_trees, leaves
from ..ir import Graph, S, parent, pop
from ..ir.nodes import Placement
from .spec import Feed, ModelSpec, label_row

PAD = 0x8000  # padding leaf j carries state (PAD + j,): above every heap position of depth <= 14
LEAF_ROUTERS = ("words", "is_padding")  # the Phi and Cond that sort the leaves, before any parameter


def leaf_source(j: int) -> str:
    """The source of a tree's ``j``-th word (left to right); the names the instance fills."""
    return f"leaf{j}"


def build_tree_rnn(
    vocab: int = len(VOCAB), hidden: int = 32, classes: int = 2, max_leaves: int = MAX_LEAVES,
    routers: Placement = "host",
) -> Graph:
    """Leaf sources -> drop padding -> embed -> [root? exit : climb, pair with sibling, compose].
    ``routers``: where ``LEAF_ROUTERS`` run; on the host (the zoo's) padding never crosses the
    link and embed's dx, which only sources would take, is left out (``design.skips_dx``)."""
    g = Graph("tree_rnn")
    words = g.phi(*(g.source(leaf_source(j), width=vocab) for j in range(max_leaves)), name="words")
    padding, real = g.cond(words, S[0] >= PAD, name="is_padding")
    for router in LEAF_ROUTERS:
        g.node(router).placement = routers
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


@functools.lru_cache(maxsize=1 << 13)
def _placed_words(tree: Tree, max_leaves: int) -> tuple[tuple[int, int], ...]:
    """``(heap position, word index)`` per word, left to right (trees are hashable: each leaf
    feed reads this, and the cache makes that one walk per tree)."""
    words = leaves(tree)
    if len(words) > max_leaves:
        raise ValueError(f"a tree of {len(words)} words does not fit {max_leaves} leaf sources")
    for position, word in words:
        if position >= PAD:
            raise ValueError(f"{word!r} at heap position {position}: the tree is deeper than 14")
    return tuple((position, WORD_INDEX[word]) for position, word in words)


def tree_rnn_spec(vocab: int = len(VOCAB), hidden: int = 32, classes: int = 2,
                  max_leaves: int = MAX_LEAVES) -> ModelSpec:
    """The zoo's tree-rnn (other sizes for tests): word ``j`` of a tree, one-hot, enters through
    ``leaf<j>`` at its heap position; the other leaf sources send padding at ``PAD + j``; the
    label waits at the root, position 0."""

    def word(j: int) -> Feed:
        def payload(example: Example) -> np.ndarray:
            placed = _placed_words(example.data, max_leaves)
            row = np.zeros((1, vocab))
            if j < len(placed):
                row[0, placed[j][1]] = 1.0
            return row

        def state(example: Example) -> tuple[int]:
            placed = _placed_words(example.data, max_leaves)
            return (placed[j][0],) if j < len(placed) else (PAD + j,)

        return Feed(payload, state)

    feeds = {leaf_source(j): word(j) for j in range(max_leaves)}
    feeds["label"] = Feed(label_row, state=(0,))
    return ModelSpec(
        "tree-rnn",
        partial(build_tree_rnn, vocab, hidden, classes, max_leaves),
        feeds,
        lambda seed: generate_sentiment_trees(seed=seed, max_leaves=max_leaves),
        description="tree RNN composing bottom-up by tag joins and Isu(parent) over generated sentiment trees",
        target=0.93,
        defaults={"mak": 16, "muf": 8, "lr": 2e-3, "epochs": 20},
    )


ENTRIES = [tree_rnn_spec()]
