"""GGSNN: graph structure, conservation, gradients through the weight-shared loop, data sets."""

from __future__ import annotations

import time

import numpy as np
import pytest

from amp_hls.datasets.babi import (
    BABI15_CLASSES,
    BABI15_FEATURES,
    BABI19_CLASSES,
    DIRECTIONS,
    SPECIES,
    GraphData,
    generate_babi15,
    generate_babi19,
    solve_babi15,
    solve_babi19,
)
from amp_hls.datasets.base import Example
from amp_hls.errors import AmpHlsError
from amp_hls.kernels import LinearKernel
from amp_hls.models import MODELS, ModelSpec
from amp_hls.models.ggsnn import build_ggsnn, ggsnn_feeds, ggsnn_steps
from amp_hls.numerics import FLOAT64, NumericConfig
from amp_hls.runtime import Engine
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig, Trainer
from tests.helpers import FIXED

ENTRIES = ("ggsnn-babi15", "ggsnn-babi19", "ggsnn-qm9")


def _regression_example() -> Example:
    """A small molecule-like graph with an empty edge type (the null node must cover it)."""
    rng = np.random.default_rng(3)
    nodes = rng.normal(size=(5, 3))
    edges = (np.array([[0, 1], [1, 0], [1, 2], [2, 1]]), np.array([[3, 4], [4, 3]]),
             np.zeros((0, 2), dtype=np.int64))
    return Example(GraphData(nodes, edges, target=0.7), 0)


@pytest.mark.parametrize("name", ENTRIES)
def test_zoo_graphs_validate_and_share_one_step(name):
    graph = MODELS[name].build()
    assert graph.validate() is graph
    # one gated step, reused every iteration: exactly one of each step Linear
    linears = sorted(n for n, node in graph.nodes.items() if node.kind == "linear")
    assert linears == ["embed", "head1", "head2", "prop_cand", "prop_gates", "prop_msg", "readout_ij"]
    assert ggsnn_steps(graph) >= 2


def _inputs(graph, example: Example):
    """The messages of ``example`` for a GGSNN ``graph`` of any size, through the model's feeds."""
    edge_types = sum(1 for n in graph.nodes if n.startswith("edges"))
    classify = graph.node("target").dtype == "index"
    return ModelSpec("t", graph, ggsnn_feeds(edge_types, ggsnn_steps(graph), classify)).inputs(example)


def _run_one(graph, example: Example, numerics: NumericConfig, train: bool = True) -> Engine:
    engine = Engine(graph, numerics, seed=0, train=train)
    engine.inject(0, _inputs(graph, example))
    assert engine.run() == [0]
    return engine


@pytest.mark.parametrize("numerics", [FLOAT64, FIXED], ids=["float", "fixed"])
@pytest.mark.parametrize("name", ["ggsnn-babi15", "ggsnn-babi19"])
def test_one_instance_forward_backward_conserves(name, numerics):
    entry = MODELS[name]
    graph = entry.build()
    example = entry.data(0).train[0]
    engine = _run_one(graph, example, numerics)
    assert engine.conservation_report() == []
    steps = ggsnn_steps(graph)
    # the loop ran T times: T forward messages through each step node, one through the readout
    assert engine.counts["prop_gates"].fwd_in == steps
    assert engine.counts["prop_agg0"].fwd_in == 2 * steps  # states and edges, every step
    assert engine.counts["readout_ij"].fwd_in == 1
    assert engine.kernels["prop_gates"].n_grads == steps  # every iteration's gradient accumulated
    record = engine.kernels["loss"].results[0]
    assert record.tag.state == (steps,)
    assert np.isfinite(record.loss)


def test_regression_instance_with_an_empty_edge_type_conserves():
    graph = build_ggsnn(3, 3, 1, loss="mse", hidden=8, steps=3, readout=8, max_nodes=5, max_edges=4)
    for numerics in (FLOAT64, FIXED):
        engine = _run_one(graph, _regression_example(), numerics)
        assert engine.conservation_report() == []
        assert engine.counts["prop_e2_done"].fwd_in == 1  # the null node's self-loop reached the end


def _loss(graph, example: Example, params: dict[str, dict[str, np.ndarray]]) -> float:
    engine = Engine(graph, FLOAT64, seed=0, train=False)
    for name, kernel in engine.kernels.items():
        if isinstance(kernel, LinearKernel):
            kernel.set_params(params[name])
    engine.inject(0, _inputs(graph, example))
    engine.run()
    (record,) = engine.kernels["loss"].results
    return record.loss


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_gradients_match_finite_differences(task):
    """The whole network in float64: backprop through T shared steps vs central differences."""
    if task == "classification":
        example = generate_babi15(n_train=1, n_val=1, n_test=1, seed=5).train[0]
        graph = build_ggsnn(BABI15_FEATURES, 4, BABI15_CLASSES, hidden=5, steps=2, readout=4,
                            max_nodes=8, max_edges=4)
    else:
        example = _regression_example()
        graph = build_ggsnn(3, 3, 1, loss="mse", hidden=5, steps=3, readout=4, max_nodes=5, max_edges=4)
    engine = _run_one(graph, example, FLOAT64)
    params = {n: {k: v.copy() for k, v in kern.params.items()}
              for n, kern in engine.kernels.items() if isinstance(kern, LinearKernel)}
    grads = {n: kern.grads for n, kern in engine.kernels.items() if isinstance(kern, LinearKernel)}
    assert _loss(graph, example, params) == pytest.approx(engine.kernels["loss"].results[0].loss, rel=1e-12)
    rng = np.random.default_rng(0)
    eps = 1e-6
    checked = 0
    for name in ("embed", "prop_msg", "prop_gates", "prop_cand", "readout_ij", "head1", "head2"):
        for tensor in params[name]:
            for _ in range(3):
                idx = tuple(int(rng.integers(s)) for s in params[name][tensor].shape)
                plus = {n: {k: v.copy() for k, v in p.items()} for n, p in params.items()}
                minus = {n: {k: v.copy() for k, v in p.items()} for n, p in params.items()}
                plus[name][tensor][idx] += eps
                minus[name][tensor][idx] -= eps
                numeric = (_loss(graph, example, plus) - _loss(graph, example, minus)) / (2 * eps)
                assert grads[name][tensor][idx] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (name, tensor, idx)
                checked += 1
    assert checked >= 30


# --- bAbI-like data ---------------------------------------------------------------------------


@pytest.mark.parametrize("generate, solve, classes", [
    (generate_babi15, solve_babi15, BABI15_CLASSES),
    (generate_babi19, solve_babi19, BABI19_CLASSES),
])
def test_babi_generators_are_deterministic_and_answerable(generate, solve, classes):
    a, b, c = generate(seed=4), generate(seed=4), generate(seed=5)
    assert a.name.startswith("generated-") and "not available offline" in a.description
    for x, y in zip(a.train, b.train):
        assert x.label == y.label and x.data.text == y.data.text
        np.testing.assert_array_equal(x.data.nodes, y.data.nodes)
        for ex, ey in zip(x.data.edges, y.data.edges):
            np.testing.assert_array_equal(ex, ey)
    assert [x.data.text for x in a.train[:20]] != [x.data.text for x in c.train[:20]]
    labels = []
    for ex in list(a.train) + list(a.val) + list(a.test):
        assert solve(ex.data) == ex.label  # brute force over the graph alone agrees
        answer = (SPECIES[ex.label] if classes == BABI15_CLASSES
                  else f"{DIRECTIONS[ex.label // 4]},{DIRECTIONS[ex.label % 4]}")
        assert ex.data.text.endswith("? " + answer)
        labels.append(ex.label)
    seen = set(labels)
    assert seen <= set(range(classes))
    assert len(seen) == (4 if classes == BABI15_CLASSES else 12)  # 19: no path turns straight back


def test_babi19_paths_are_unique_two_step_paths():
    for ex in generate_babi19(n_train=200, n_val=1, n_test=1, seed=9).train:
        solve_babi19(ex.data)  # raises unless exactly one two-move path and no direct edge
        first, second = divmod(ex.label, 4)
        assert second != (first + 2) % 4


def test_babi15_stories_read_like_babi():
    ex = generate_babi15(n_train=1, n_val=1, n_test=1, seed=0).train[0]
    assert "are afraid of" in ex.data.text and " is a " in ex.data.text and "What is" in ex.data.text


def test_babi15_trains_to_target_quickly():
    entry = MODELS["ggsnn-babi15"]
    d = entry.defaults
    config = TrainConfig(mak=d["mak"], muf=d["muf"], optimizer=OptimizerConfig("adam", lr=d["lr"]),
                         epochs=d["epochs"], target=entry.target)
    start = time.perf_counter()
    trainer = Trainer(entry, config)
    trainer.fit()
    summary = trainer.summary()
    assert summary["test_accuracy"] >= 0.95
    assert summary["conservation_ok"]
    assert time.perf_counter() - start < 60


# --- QM9 --------------------------------------------------------------------------------------


def test_qm9_missing_extra_is_a_clear_error(monkeypatch):
    import sys

    from amp_hls.datasets import qm9

    monkeypatch.setitem(sys.modules, "qm9pack", None)  # import now raises ImportError
    with pytest.raises(AmpHlsError, match=r"pip install 'amp-hls\[qm9\]'"):
        qm9.smiles_to_graph("C")


def test_qm9_size_from_the_environment(monkeypatch):
    from amp_hls.datasets import qm9

    monkeypatch.delenv(qm9.SIZE_ENV, raising=False)
    assert qm9.default_size() == qm9.DEFAULT_SIZE
    monkeypatch.setenv(qm9.SIZE_ENV, "all")
    assert qm9.default_size() is None
    monkeypatch.setenv(qm9.SIZE_ENV, "250")
    assert qm9.default_size() == 250
    monkeypatch.setenv(qm9.SIZE_ENV, "lots")
    with pytest.raises(AmpHlsError, match=qm9.SIZE_ENV):
        qm9.default_size()


def test_qm9_smiles_become_typed_heavy_atom_graphs():
    pytest.importorskip("rdkit")
    from amp_hls.datasets import qm9

    nodes, edges = qm9.smiles_to_graph("c1ccccc1")  # benzene: 6 aromatic C with one H each
    assert nodes.shape == (6, qm9.QM9_FEATURES)
    assert [len(e) for e in edges] == [0, 0, 0, 12]
    assert np.all(nodes[:, 0] == 1) and np.all(nodes[:, len(qm9.ELEMENTS) + 1] == 1)
    nodes, edges = qm9.smiles_to_graph("C#N")
    assert nodes[:, :4].tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]
    assert [len(e) for e in edges] == [0, 0, 2, 0]
    assert sorted(map(tuple, edges[2].tolist())) == [(0, 1), (1, 0)]
    nodes, edges = qm9.smiles_to_graph("OC=O")
    assert [len(e) for e in edges] == [2, 2, 0, 0]
    nodes, edges = qm9.smiles_to_graph("C")  # methane: one node, no bonds at all
    assert nodes.shape[0] == 1 and all(len(e) == 0 for e in edges)
    assert qm9.smiles_to_graph("not a smiles") is None


def test_qm9_table_and_normalisation_constants():
    pytest.importorskip("qm9pack")
    pytest.importorskip("rdkit")
    from amp_hls.datasets import qm9

    table = qm9.read_qm9_table()
    assert len(table) == 130_831
    assert table[0][:2] == (1, "C")
    assert table[0][2] == pytest.approx(0.5048 * qm9.HARTREE_EV)  # methane's gap, in eV
    gaps = np.array([row[2] for row in table])
    assert gaps.mean() == pytest.approx(qm9.QM9_GAP_MEAN_EV, abs=1e-5)
    assert gaps.std() == pytest.approx(qm9.QM9_GAP_STD_EV, abs=1e-5)
    assert MODELS["ggsnn-qm9"].metric_scale == qm9.QM9_GAP_STD_EV


def test_qm9_subset_loads_and_runs_through_the_model():
    pytest.importorskip("qm9pack")
    pytest.importorskip("rdkit")
    from amp_hls.datasets import qm9

    splits = qm9.load_qm9_splits(seed=1, n=40)
    again = qm9.load_qm9_splits(seed=1, n=40)
    assert [e.data.text for e in splits.train] == [e.data.text for e in again.train]  # deterministic
    examples = list(splits.train) + list(splits.val) + list(splits.test)
    assert len(examples) == 40
    for ex in examples:
        assert 1 <= ex.data.n_nodes <= qm9.QM9_MAX_NODES
        assert all(len(e) <= qm9.QM9_MAX_EDGES for e in ex.data.edges)
        gap = ex.data.target * qm9.QM9_GAP_STD_EV + qm9.QM9_GAP_MEAN_EV
        assert 0.5 < gap < 17.0
    entry = MODELS["ggsnn-qm9"]
    graph = entry.build()
    engine = Engine(graph, NumericConfig("fixed"), seed=0)
    for key, ex in enumerate(examples[:8]):
        engine.inject(key, entry.inputs(ex))
    assert sorted(engine.run()) == list(range(8))
    assert engine.conservation_report() == []
