"""A generated sentiment treebank: binary parse trees whose root label composes bottom-up.

Generated, not collected (the Stanford Sentiment Treebank is a download and a licence; this is
neither). Every rule below is the whole truth of the data set, so a model that reaches the root
label has learnt the composition, and the tests can check the rules on hand-written trees.

A tree is a word (a leaf) or a pair ``(left, right)``. Words are of four kinds:

- *content* words carry a polarity: positive ``+1``, negative ``-1`` or neutral ``0``;
- *negators* (``not``, ``never``) flip the polarity of the phrase they modify;
- *intensifiers* (``very``, ``really``) double it.

A *phrase* is a content word or any pair built by the grammar; its score lies in ``[-2, 2]``:

- ``score(word) = polarity(word)``;
- ``score((negator, p)) = -score(p)``;
- ``score((intensifier, p)) = clip(2 * score(p))``;
- ``score((p, q)) = clip(score(p) + score(q))`` for two phrases;

where ``clip`` saturates at ``±2`` (a phrase is at most *strongly* positive or negative). An
operator word is always the left child of the phrase it modifies and never a phrase on its own.
The label of a tree is 1 (positive) when its root score is above zero and 0 (negative) below;
trees that score exactly zero are neutral and not part of this two-class task.

Trees are drawn with a leaf budget ``n`` uniform in ``[1, max_leaves]``: one leaf is a content
word (positive, negative or neutral with probabilities 0.3 / 0.3 / 0.4); more leaves become an
operator over a phrase of ``n - 1`` leaves (probability 0.25, negator or intensifier equally) or
two phrases splitting the budget at a uniform point. A tree deeper than ``max_depth`` or scoring
zero is drawn again. Everything is a function of the seed.
"""

from __future__ import annotations

import numpy as np

from .base import Example, Splits

Tree = str | tuple["Tree", "Tree"]

POSITIVE = ("good", "great", "fun", "clever", "moving", "charming", "funny", "beautiful")
NEGATIVE = ("bad", "dull", "boring", "awful", "weak", "messy", "tedious", "silly")
NEUTRAL = ("the", "movie", "film", "plot", "actors", "story", "script", "it", "this", "ending")
NEGATORS = ("not", "never")
INTENSIFIERS = ("very", "really")
VOCAB: tuple[str, ...] = POSITIVE + NEGATIVE + NEUTRAL + NEGATORS + INTENSIFIERS
WORD_INDEX = {word: i for i, word in enumerate(VOCAB)}
POLARITY = {**{w: 1 for w in POSITIVE}, **{w: -1 for w in NEGATIVE}, **{w: 0 for w in NEUTRAL}}

MAX_SCORE = 2
MAX_LEAVES = 12
MAX_DEPTH = 8
NAME = "generated-sentiment-trees"
DESCRIPTION = (
    f"generated: binary sentiment trees of 1-{MAX_LEAVES} words, depth <= {MAX_DEPTH}; polarity "
    "lexicon, negation flips, intensifiers double, sums saturate at +-2; label = sign at the root "
    "(deterministic from the seed; rules in amp_hls/datasets/trees.py)"
)


def _clip(score: int) -> int:
    return max(-MAX_SCORE, min(MAX_SCORE, score))


def score(tree: Tree) -> int:
    """The phrase score of ``tree`` by the module's rules; ``ValueError`` outside the grammar."""
    if isinstance(tree, str):
        if tree not in POLARITY:
            raise ValueError(f"{tree!r} is not a content word, so not a phrase on its own")
        return POLARITY[tree]
    left, right = tree
    if left in NEGATORS:
        return -score(right)
    if left in INTENSIFIERS:
        return _clip(2 * score(right))
    return _clip(score(left) + score(right))


def label(tree: Tree) -> int:
    """1 when the root scores positive, 0 when negative; a neutral tree has no label here."""
    s = score(tree)
    if s == 0:
        raise ValueError(f"{to_text(tree)} is neutral (score 0)")
    return int(s > 0)


def leaves(tree: Tree, position: int = 0) -> list[tuple[int, str]]:
    """``(heap position, word)`` of every leaf, left to right: root 0, children ``2p+1``, ``2p+2``."""
    if isinstance(tree, str):
        return [(position, tree)]
    return leaves(tree[0], 2 * position + 1) + leaves(tree[1], 2 * position + 2)


def depth(tree: Tree) -> int:
    """Edges from the root to the deepest leaf (a lone word has depth 0)."""
    return 0 if isinstance(tree, str) else 1 + max(depth(tree[0]), depth(tree[1]))


def to_text(tree: Tree) -> str:
    """Bracketed text, e.g. ``((not good) movie)``."""
    return tree if isinstance(tree, str) else f"({to_text(tree[0])} {to_text(tree[1])})"


def random_tree(rng: np.random.Generator, n_leaves: int) -> Tree:
    """A phrase of exactly ``n_leaves`` words drawn by the grammar in the module docs."""
    if n_leaves == 1:
        kind = rng.choice(3, p=[0.3, 0.3, 0.4])
        return str(rng.choice((POSITIVE, NEGATIVE, NEUTRAL)[kind]))
    if rng.random() < 0.25:
        operator = NEGATORS if rng.random() < 0.5 else INTENSIFIERS
        return (str(rng.choice(operator)), random_tree(rng, n_leaves - 1))
    k = int(rng.integers(1, n_leaves))
    return (random_tree(rng, k), random_tree(rng, n_leaves - k))


def sample_trees(
    n: int, rng: np.random.Generator, max_leaves: int = MAX_LEAVES, max_depth: int = MAX_DEPTH
) -> list[Example]:
    """``n`` labelled trees; too deep or neutral ones are drawn again."""
    out: list[Example] = []
    while len(out) < n:
        tree = random_tree(rng, int(rng.integers(1, max_leaves + 1)))
        if depth(tree) <= max_depth and score(tree) != 0:
            out.append(Example(tree, label(tree)))
    return out


def generate_sentiment_trees(
    n_train: int = 3000,
    n_val: int = 1000,
    n_test: int = 1000,
    max_leaves: int = MAX_LEAVES,
    max_depth: int = MAX_DEPTH,
    seed: int = 0,
) -> Splits:
    """Train / validation / test trees, each split from its own stream of ``seed``."""
    streams = np.random.default_rng(seed).spawn(3)
    return Splits(
        NAME,
        sample_trees(n_train, streams[0], max_leaves, max_depth),
        sample_trees(n_val, streams[1], max_leaves, max_depth),
        sample_trees(n_test, streams[2], max_leaves, max_depth),
        DESCRIPTION,
    )
