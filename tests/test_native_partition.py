"""The worker threads' partition: runs of consecutive nodes with the least largest cost (pure
Python), from the serving times the native runtime measures per node; a threaded run that
re-partitions between epochs conserves every message and trains."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

from amp_hls.errors import AmpHlsError
from amp_hls.ir.nodes import Source
from amp_hls.models import MODELS
from amp_hls.native.partition import balanced_runs, node_cost, partition
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig


def loads(costs: list[float], owners: list[int], threads: int, base: float = 0.0) -> list[float]:
    out = [0.0] * threads
    out[0] = base
    for c, w in zip(costs, owners):
        out[w] += c
    return out


def best_by_brute_force(costs: list[float], threads: int, base: float) -> float:
    """The least largest load over every placement of the cuts (non-empty runs)."""
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(costs)), threads - 1):
        edges = [0, *cuts, len(costs)]
        owners = [w for w in range(threads) for _ in range(edges[w + 1] - edges[w])]
        best = min(best, max(loads(costs, owners, threads, base)))
    return best


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_balanced_runs_least_largest_load(threads: int) -> None:
    """Consecutive non-empty runs in order, and no placement of the cuts has a smaller largest
    load (worker 0 starting at its sources' cost)."""
    rng = random.Random(threads)
    for _ in range(40):
        costs = [rng.choice([0.0, 1.0, 5.0, 40.0]) * rng.random() for _ in range(rng.randint(threads, 11))]
        base = rng.choice([0.0, 3.0])
        owners = balanced_runs(costs, threads, base)
        assert owners == sorted(owners) and set(owners) == set(range(threads)), owners
        assert max(loads(costs, owners, threads, base)) == pytest.approx(best_by_brute_force(costs, threads, base))


def test_balanced_runs_few_items_and_one_heavy() -> None:
    assert balanced_runs([5.0], 3) == [0]
    assert balanced_runs([], 2) == []
    # one heavy item gets a worker to itself; the light ones share the other
    assert balanced_runs([1.0, 1.0, 10.0, 1.0], 2) == [0, 0, 1, 1]
    assert balanced_runs([1.0, 1.0, 10.0, 1.0], 2, base=12.0) == [0, 1, 1, 1]  # worker 0 busy with its sources


def test_partition_from_given_costs() -> None:
    """Measured costs move the cut where the static model would not put it; sources stay with
    worker 0; no costs, or all zero, is the static model."""
    g = MODELS["list-rnn"].build()
    names = list(g.nodes)
    static = partition(g, 2)
    assert partition(g, 2, [0.0] * len(names)) == static
    assert static == partition(g, 2, [float(node_cost(g, n)) for n in names])
    inner = [i for i, n in enumerate(names) if not isinstance(g.nodes[n], Source)]
    heavy = [1.0] * len(names)
    heavy[inner[-1]] = 1000.0  # the last node alone outweighs every other: it gets worker 1 alone
    owners = partition(g, 2, heavy)
    assert [owners[i] for i in inner] == [0] * (len(inner) - 1) + [1]
    assert all(owners[i] == 0 for i, n in enumerate(names) if isinstance(g.nodes[n], Source))
    with pytest.raises(ValueError, match="costs for"):
        partition(g, 2, [1.0])


def small(model: str, n: int) -> tuple:
    spec = MODELS[model]
    full = spec.splits(0)
    return spec, dataclasses.replace(full, train=full.train[:n], val=full.val[:40], test=full.test[:40])


def config(**kw: object) -> TrainConfig:
    base = {"mak": 16, "muf": 4, "epochs": 2, "numerics": "fixed", "optimizer": OptimizerConfig(kind="adam", lr=3e-3)}
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.gxx
def test_measured_costs_positive_and_heavier_for_a_heavier_node() -> None:
    """Every node that took messages has a positive measured cost (sources: making their
    messages); list-rnn's Linear costs more than its activation, which takes as many messages."""
    from amp_hls.native import NativeTrainer

    spec, splits = small("list-rnn", 60)
    t = NativeTrainer(spec, config(), splits)
    assert not t.run.node_ticks().any()
    t.train_epoch()
    ticks, counts = t.run.node_ticks(), t.run.node_counts()
    names = t.run.native.nodes
    assert all(ticks[i] > 0 for i in range(len(names)) if counts[i].any()), dict(zip(names, ticks))
    rnn, act = names.index("rnn"), names.index("rnn_act")
    assert counts[rnn, 0] == counts[act, 0] and ticks[rnn] > ticks[act]


@pytest.mark.gxx
def test_threaded_repartition_between_epochs_conserves_and_trains() -> None:
    """Two workers on a deliberately bad partition (worker 1 the last node alone): the measured
    costs re-partition the run between epochs; every message still comes back, and it trains on.
    Changing the partition during an epoch is refused."""
    from amp_hls.native import NativeTrainer

    spec, splits = small("list-rnn", 70)
    t = NativeTrainer(spec, config(epochs=4), splits, threads=2)
    bad = [0] * len(t.owners)
    bad[t.run.native.nodes.index("xent")] = 1
    t.set_owners(bad)
    losses = []
    for _ in range(4):
        losses.append(t.train_epoch()[0])
        assert t.conservation_report() == []
        assert t.owners == partition(t.graph, 2, t.run.node_ticks()) != bad
    assert all(np.isfinite(losses)) and t.instances == 280
    t.run.epoch_begin(np.arange(70))
    assert t.run.epoch_run(5) >= 5
    with pytest.raises(AmpHlsError, match="only between epochs"):
        t.run.set_threads(2, t.owners)
    while t.run.epoch_run(100) == 100:
        pass
    assert t.conservation_report() == []
