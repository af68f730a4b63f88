"""The message engine: whole graphs forward and backward, loops, conservation, order independence."""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.errors import KernelError
from amp_hls.ir import Graph, S, inc
from amp_hls.kernels import LinearKernel, LossKernel
from amp_hls.kernels.base import Packed
from amp_hls.message import Message
from amp_hls.models import MODELS
from amp_hls.numerics import NumericConfig
from amp_hls.runtime import Engine
from tests.helpers import FIXED


def _run(model: str, numerics: NumericConfig, n: int = 12, seed: int = 0, max_batch: int = 256,
         train: bool = True, weights_of: Engine | None = None, packed: bool = True) -> Engine:
    entry = MODELS[model]
    graph = entry.build()
    engine = Engine(graph, numerics, seed=seed, max_batch=max_batch, train=train, packed=packed)
    if weights_of is not None:
        for name, kernel in engine.kernels.items():
            if isinstance(kernel, LinearKernel):
                kernel.set_params(weights_of.kernels[name].params)
    for key, example in enumerate(entry.data(0).train[:n]):
        engine.inject(key, entry.inputs(example))
    finished = engine.run()
    assert sorted(finished) == list(range(n))
    return engine


def _losses(engine: Engine) -> dict[int, float]:
    loss = next(k for k in engine.kernels.values() if isinstance(k, LossKernel))
    return {r.tag.key: r.loss for r in loss.results}


@pytest.mark.parametrize("model", ["mlp", "list-rnn"])
@pytest.mark.parametrize("mode", ["float", "fixed"])
def test_every_instance_completes_and_nothing_is_lost(model, mode):
    engine = _run(model, NumericConfig(mode))
    assert engine.conservation_report() == []
    assert engine.active_keys == 0
    assert len(_losses(engine)) == 12


def test_list_rnn_loops_once_per_element():
    entry = MODELS["list-rnn"]
    examples = entry.data(0).train[:12]
    engine = _run("list-rnn", NumericConfig())
    assert engine.counts["rnn"].fwd_in == sum(len(e.data) for e in examples)
    assert engine.counts["head"].fwd_in == 12


@pytest.mark.parametrize("model", ["list-rnn", "tree-rnn", "ggsnn-babi15"])
def test_fixed_point_results_do_not_depend_on_schedule_or_batching(model):
    """Same weights, different service order and batch sizes: bit-identical losses and gradients
    (the vectorised kernels: joins, Split, Broadcast, Aggregate, Loss, over whole graphs)."""
    a = _run(model, FIXED, seed=0, max_batch=256)
    for other in (_run(model, FIXED, max_batch=1, weights_of=a),
                  _run(model, FIXED, seed=5, max_batch=3, weights_of=a)):
        assert _losses(a) == _losses(other)
        for name, kernel in a.kernels.items():
            if isinstance(kernel, LinearKernel):
                for key, grad in kernel.grads.items():
                    np.testing.assert_array_equal(grad, other.kernels[name].grads[key])


@pytest.mark.parametrize("model", ["mlp", "list-rnn", "tree-rnn", "ggsnn-babi15"])
@pytest.mark.parametrize("mode", ["float", "fixed"])
@pytest.mark.parametrize("max_batch", [256, 5])
def test_packed_batches_change_no_kernel_call_and_no_bit(model, mode, max_batch):
    """Packing only saves Python work: the same kernel calls on the same batches, the same numbers
    (max_batch 5 cuts packed batches in two)."""
    packed = _run(model, NumericConfig(mode), n=24, max_batch=max_batch)
    plain = _run(model, NumericConfig(mode), n=24, max_batch=max_batch, packed=False)
    assert packed.stats == plain.stats
    assert packed.counts == plain.counts
    assert _losses(packed) == _losses(plain)
    for name, kernel in packed.kernels.items():
        if isinstance(kernel, LinearKernel):
            for key, grad in kernel.grads.items():
                np.testing.assert_array_equal(grad, plain.kernels[name].grads[key])
    assert packed.conservation_report() == []


def _list_rnn_injected(n: int, members: set[str] | None = None) -> Engine:
    """A list-rnn engine with ``n`` instances injected and nothing run yet."""
    entry = MODELS["list-rnn"]
    graph = entry.build()
    engine = Engine(graph, members=members)
    for key, example in enumerate(entry.data(0).train[:n]):
        engine.inject(key, entry.inputs(example))
    return engine


def test_packed_batches_really_travel():
    engine = _list_rnn_injected(8)
    seen = 0
    while not engine.idle:
        seen += sum(type(item) is Packed for items in engine.inboxes.values() for item in items)
        engine.step()
    assert seen > 0


def test_only_plain_messages_leave_an_engine():
    """Kernels with a route out of the engine emit messages, so the outbox never holds a batch."""
    graph = MODELS["list-rnn"].build()
    host = _list_rnn_injected(8, members=set(graph.nodes) - {"rnn"})
    assert not host.kernels["step_in"].packed and host.kernels["head"].packed
    host.run()
    out = host.take_outbox()
    assert len(out) == 8 and all(type(msg) is Message for _, msg in out)


def test_batching_happens_when_messages_wait():
    engine = _run("list-rnn", NumericConfig(), n=16)
    assert engine.stats.batches["rnn"] < engine.counts["rnn"].fwd_in + engine.counts["rnn"].bwd_in


def test_the_fullest_inbox_is_served_first():
    engine = _list_rnn_injected(6)
    while not engine.idle:
        sizes = engine.inbox_sizes()
        calls = dict(engine.stats.batches)
        engine.step()
        served = next(n for n, c in engine.stats.batches.items() if c != calls.get(n, 0))
        assert max(n for (node, _, _), n in sizes.items() if node == served) == max(sizes.values())


def test_shape_checks_run_only_at_the_engine_boundary(monkeypatch):
    """Inside one engine payloads are shaped by their producers; at the boundary they are checked."""
    entry = MODELS["list-rnn"]
    graph = entry.build()
    assert not any(k.checks for k in Engine(graph).kernels.values())
    host = Engine(graph, members=set(graph.nodes) - {"rnn"})
    assert host.kernels["step_in"].checks and host.kernels["rnn_act"].checks
    assert not host.kernels["head"].checks
    monkeypatch.setenv("AMP_HLS_CHECKS", "1")
    assert all(k.checks for k in Engine(graph).kernels.values())


def test_inference_caches_nothing():
    engine = _run("list-rnn", NumericConfig(), train=False)
    assert engine.conservation_report() == []
    assert all(k.pending() == 0 for k in engine.kernels.values())
    assert engine.counts["rnn"].bwd_in == 0


def test_missing_source_data_is_a_clear_error():
    entry = MODELS["mlp"]
    graph = entry.build()
    engine = Engine(graph)
    with pytest.raises(KernelError, match="label"):
        engine.inject(0, {"x": ((), np.zeros((1, 64)))})


def test_a_loop_that_never_exits_fails_instead_of_hanging():
    g = Graph("spin")
    h = g.phi(g.source("x", width=2), arity=2, name="h")
    again, done = g.cond(g.isu(h, inc(0)), S[0] >= 0)  # always true
    g.feed(h, again)
    g.sink(done)
    engine = Engine(g.validate())
    engine.inject(0, {"x": ((0,), np.zeros((1, 2)))})
    with pytest.raises(KernelError, match="65535|settle"):
        engine.run(max_steps=200_000)
