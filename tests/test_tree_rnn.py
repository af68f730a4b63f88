"""tree-rnn (docs/models/tree-rnn.md): the generated treebank's rules, the IR loop over heap positions, training."""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.datasets import Example
from amp_hls.datasets.trees import (
    MAX_DEPTH,
    MAX_LEAVES,
    NAME,
    VOCAB,
    WORD_INDEX,
    Tree,
    depth,
    generate_sentiment_trees,
    label,
    leaves,
    score,
    to_text,
)
from amp_hls.errors import AmpHlsError
from amp_hls.message import Direction, Message
from amp_hls.models import MODELS
from amp_hls.models.tree_rnn import PAD, build_tree_rnn, leaf_source
from amp_hls.numerics import FLOAT64 as F64
from amp_hls.numerics import NumericConfig
from amp_hls.runtime import Engine, OptimizerConfig, TrainConfig, Trainer
from tests.helpers import FIXED

# --- the generator's rules on hand-checked trees ---------------------------------------------


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        ("good", 1),
        ("awful", -1),
        ("movie", 0),
        (("not", "good"), -1),
        (("never", "bad"), 1),
        (("not", ("not", "good")), 1),
        (("very", "good"), 2),
        (("really", "bad"), -2),
        (("very", ("very", "good")), 2),  # saturates at +2
        (("very", "movie"), 0),
        (("not", ("very", "good")), -2),
        (("good", "bad"), 0),
        ((("very", "good"), "bad"), 1),  # the intensifier decides
        ((("not", "good"), "movie"), -1),
        ((("good", "great"), "fun"), 2),  # sums saturate too
        ((("good", "great"), ("not", ("very", "fun"))), 0),
        (("not", (("good", "great"), "fun")), -2),
    ],
    ids=lambda v: to_text(v) if isinstance(v, (str, tuple)) else str(v),
)
def test_score_follows_the_documented_rules(tree: Tree, expected: int):
    assert score(tree) == expected


def test_label_is_the_sign_at_the_root_and_neutral_trees_have_none():
    assert label(("not", "bad")) == 1
    assert label((("very", "bad"), "good")) == 0
    with pytest.raises(ValueError, match="neutral"):
        label(("good", "bad"))


@pytest.mark.parametrize("tree", ["not", "very", ("good", "not"), ("not", "very")])
def test_an_operator_is_never_a_phrase(tree: Tree):
    with pytest.raises(ValueError, match="not a content word"):
        score(tree)


def test_leaves_carry_heap_positions_left_to_right():
    tree = (("not", "good"), ("movie", ("very", "fun")))
    assert leaves(tree) == [(3, "not"), (4, "good"), (5, "movie"), (13, "very"), (14, "fun")]
    assert depth(tree) == 3 and depth("fun") == 0 and leaves("fun") == [(0, "fun")]
    assert to_text(tree) == "((not good) (movie (very fun)))"


def test_generation_is_deterministic_in_the_seed():
    a, b = generate_sentiment_trees(50, 10, 10, seed=3), generate_sentiment_trees(50, 10, 10, seed=3)
    assert a == b
    assert a.name == NAME and "generated" in a.description
    assert generate_sentiment_trees(50, 10, 10, seed=4).train != a.train


def test_generated_trees_keep_the_bounds_and_their_labels():
    splits = generate_sentiment_trees(400, 50, 50, max_leaves=6, max_depth=4, seed=1)
    examples = [*splits.train, *splits.val, *splits.test]
    for e in examples:
        words = [w for _, w in leaves(e.data)]
        assert 1 <= len(words) <= 6 and depth(e.data) <= 4
        assert set(words) <= set(VOCAB)
        assert score(e.data) != 0 and e.label == label(e.data)
    sizes = {len(leaves(e.data)) for e in examples}
    assert sizes == set(range(1, 7))
    assert 0.35 < np.mean([e.label for e in examples]) < 0.65
    assert any("not" in to_text(e.data) or "never" in to_text(e.data) for e in examples)
    assert any("very" in to_text(e.data) or "really" in to_text(e.data) for e in examples)


def test_default_trees_stay_below_the_padding_tags():
    splits = MODELS["tree-rnn"].data(0)
    positions = [p for e in splits.train for p, _ in leaves(e.data)]
    assert max(positions) < (1 << (MAX_DEPTH + 1)) - 1 <= PAD
    assert max(len(leaves(e.data)) for e in splits.train) == MAX_LEAVES


# --- the graph and single instances ----------------------------------------------------------


def _engine(numerics: NumericConfig = F64, seed: int = 0) -> Engine:
    return Engine(build_tree_rnn(), numerics, seed=seed)


def _run(engine: Engine, tree: Tree, key: int = 0) -> float:
    """Forward and backward of one tree; returns its loss after checking nothing was lost."""
    example = Example(tree, label(tree))
    engine.inject(key, MODELS["tree-rnn"].inputs(example))
    assert engine.run() == [key]
    assert engine.conservation_report() == []
    (record,) = [r for r in engine.kernels["xent"].results if r.tag.key == key]
    return record.loss


def _reference_loss(engine: Engine, tree: Tree) -> float:
    """The recursive tree RNN written out in numpy with the engine's weights."""
    p = {name: engine.kernels[name].params for name in ("embed", "compose", "head")}  # type: ignore[attr-defined]

    def h(t: Tree) -> np.ndarray:
        if isinstance(t, str):
            return np.tanh(p["embed"]["weight"][:, WORD_INDEX[t]] + p["embed"]["bias"])
        x = np.concatenate([h(t[0]), h(t[1])])
        return np.tanh(p["compose"]["weight"] @ x + p["compose"]["bias"])

    logits = p["head"]["weight"] @ h(tree) + p["head"]["bias"]
    return float(np.log(np.exp(logits).sum()) - logits[label(tree)])


def test_the_graph_validates_with_the_loop_in_the_ir():
    g = build_tree_rnn()
    kinds = {n.name: n.kind for n in g.nodes.values()}
    assert kinds["node"] == "phi" and kinds["at_root"] == "cond" and kinds["climb"] == "isu"
    assert kinds["pair"] == "concat" and kinds["padding"] == "sink"
    assert sum(k == "source" for k in kinds.values()) == MAX_LEAVES + 1
    assert MODELS["tree-rnn"].build().summary() == g.summary()


TREE = (("not", "good"), ("movie", ("very", "fun")))


@pytest.mark.parametrize("numerics", [F64, FIXED], ids=["float", "fixed"])
def test_one_tree_runs_forward_and_backward_and_conserves(numerics: NumericConfig):
    engine = _engine(numerics)
    _run(engine, TREE)
    n = len(leaves(TREE))
    assert engine.counts["embed"].fwd_in == n
    assert engine.counts["compose"].fwd_in == n - 1  # one composition per internal node
    assert engine.counts["head"].fwd_in == 1
    assert engine.counts["padding"].fwd_in == MAX_LEAVES - n
    assert engine.counts["compose"].bwd_in == n - 1


def test_the_ir_computes_the_recursive_tree_rnn():
    engine = _engine()
    assert _run(engine, TREE) == pytest.approx(_reference_loss(engine, TREE), rel=1e-12)


def test_fixed_point_tracks_float():
    tree = ("not", (("very", "bad"), "movie"))
    fixed, real = _engine(FIXED), _engine(F64)
    assert _run(fixed, tree) == pytest.approx(_run(real, tree), abs=0.02)


@pytest.mark.parametrize("numerics", [F64, FIXED], ids=["float", "fixed"])
def test_a_one_leaf_tree_is_its_own_root(numerics: NumericConfig):
    engine = _engine(numerics)
    _run(engine, "good")
    assert engine.counts["compose"].fwd_in == 0
    assert engine.counts["head"].fwd_in == 1 and engine.counts["padding"].fwd_in == MAX_LEAVES - 1


def test_gradients_reach_every_leaf_and_match_finite_differences():
    engine = _engine()
    arrived: dict[str, np.ndarray] = {}
    for j in range(MAX_LEAVES):
        kernel = engine.kernels[leaf_source(j)]

        def record(port: int, msgs: list[Message], kernel=kernel, original=kernel.backward):  # type: ignore[no-untyped-def]
            assert all(m.direction is Direction.BWD for m in msgs)
            arrived[kernel.name] = msgs[0].payload
            return original(port, msgs)

        kernel.backward = record  # type: ignore[method-assign]
    _run(engine, TREE)
    n = len(leaves(TREE))
    assert len(arrived) == MAX_LEAVES  # every source hears back, padding included
    for j in range(MAX_LEAVES):
        nonzero = bool(np.any(arrived[leaf_source(j)]))
        assert nonzero == (j < n), j

    # the accumulated embedding gradient is d loss / d W, column by column of the words used
    embed = engine.kernels["embed"]
    grad = embed.grads["weight"].copy()  # type: ignore[attr-defined]
    used = {WORD_INDEX[w] for _, w in leaves(TREE)}
    assert all(np.any(grad[:, c]) == (c in used) for c in range(len(VOCAB)))
    w = embed.params["weight"]  # type: ignore[attr-defined]
    eps = 1e-6
    for row, col in [(0, WORD_INDEX["not"]), (3, WORD_INDEX["fun"]), (7, WORD_INDEX["good"])]:
        losses = []
        for delta in (eps, -eps):
            bumped = w.copy()
            bumped[row, col] += delta
            embed.set_params({"weight": bumped})  # type: ignore[attr-defined]
            losses.append(_reference_loss(engine, TREE))
        embed.set_params({"weight": w})  # type: ignore[attr-defined]
        assert grad[row, col] == pytest.approx((losses[0] - losses[1]) / (2 * eps), rel=1e-6, abs=1e-9)


def test_many_trees_in_flight_complete_and_conserve():
    engine = _engine(NumericConfig())
    examples = generate_sentiment_trees(40, 1, 1, seed=5).train
    for key, e in enumerate(examples):
        engine.inject(key, MODELS["tree-rnn"].inputs(e))
    assert sorted(engine.run()) == list(range(len(examples)))
    assert engine.conservation_report() == []
    assert engine.counts["compose"].fwd_in == sum(len(leaves(e.data)) - 1 for e in examples)


def test_a_tree_with_too_many_words_is_refused():
    tree: Tree = "good"
    for _ in range(MAX_LEAVES):
        tree = (tree, "movie")
    with pytest.raises(AmpHlsError, match="source 'leaf0': ValueError: a tree of 13 words does not fit 12 leaf sources"):
        MODELS["tree-rnn"].inputs(Example(tree, 1))


# --- training --------------------------------------------------------------------------------


@pytest.mark.slow  # 9-11 s here: the whole default training run
def test_async_training_reaches_the_target_accuracy():
    entry = MODELS["tree-rnn"]
    d = entry.defaults
    config = TrainConfig(mak=d["mak"], muf=d["muf"], optimizer=OptimizerConfig("adam", lr=d["lr"]),
                         epochs=d["epochs"], seed=0, target=entry.target)
    trainer = Trainer(entry, config)
    trainer.fit()
    s = trainer.summary()
    assert s["test_accuracy"] >= 0.90, s["test_accuracy"]
    assert s["conservation_ok"] is True, s["conservation_problems"]
    assert s["staleness"]["compose"]["max"] > 0  # the composition runs many times per instance
