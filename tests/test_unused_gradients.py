"""A device Linear leaves out the dx that only host sources would receive (``design.skips_dx``,
``design.gradient_unused``): fed by a source, or by host nodes without parameters that only
sources feed, such as tree-rnn's leaf routers. The host answers that edge with a zero gradient,
which trains the model exactly as the real one: the GRADS the device dumps and the losses it
reports are the same, bit for bit, as with the routers on the device and embed's dx computed."""

from __future__ import annotations

from collections import Counter

import numpy as np

from amp_hls.cycles.report import sample_inputs
from amp_hls.design import dx_skipped, gradient_unused
from amp_hls.host import CpuDevice
from amp_hls.host.runner import HostRunner
from amp_hls.ir import Graph, S, inc
from amp_hls.ir.nodes import Placement
from amp_hls.models import MODELS
from amp_hls.models.tree_rnn import LEAF_ROUTERS, build_tree_rnn
from amp_hls.placement import place
from amp_hls.wire import Kind
from tests.helpers import FIXED, run_host


def _graph(upstream: str) -> Graph:
    """source -> [upstream node, on the host] -> fc (device) -> mse loss."""
    g = Graph("one")
    x = g.source("x", width=4)
    if upstream == "phi":
        x = g.phi(x, g.source("y", width=4), name="up")
    elif upstream == "linear":
        x = g.linear(x, 4, name="up")
    elif upstream == "tanh":
        x = g.tanh(x, name="up")
    g.loss(g.linear(x, 2, name="fc"), g.source("t", width=2), "mse", name="loss")
    if upstream != "none":
        g.node("up").placement = "host"
    return g.validate()


def test_only_host_nodes_without_parameters_upstream_leave_a_gradient_unused() -> None:
    for upstream, unused in (("none", True), ("phi", True), ("tanh", True), ("linear", False)):
        graph = _graph(upstream)
        assert dx_skipped(place(graph)) == ({"fc"} if unused else set()), upstream
    on_device = _graph("tanh")
    on_device.node("up").placement = "device"  # its backward runs on the device: fc's dx is its input
    assert not gradient_unused(on_device, "up") and dx_skipped(place(on_device)) == frozenset()


def _target_through(squash: Placement) -> Graph:
    """x -> fc (device) -> mse loss (device) <- tanh ``squash`` (placed there) <- t."""
    g = Graph("target_through")
    g.loss(g.linear(g.source("x", width=4), 2, name="fc"), g.tanh(g.source("t", width=2), name="squash"),
           "mse", name="loss")
    g.node("loss").placement = "device"
    g.node("squash").placement = squash
    return g.validate()


def test_a_device_loss_leaves_out_its_targets_gradient_through_host_nodes_alike() -> None:
    hosted, on_device = _target_through("host"), _target_through("device")
    assert dx_skipped(place(hosted)) == {"fc", "loss"}
    assert dx_skipped(place(on_device)) == {"fc"}  # squash's backward runs on the device: the loss sends it
    rng = np.random.default_rng(0)
    instances = [{"x": ((), rng.uniform(-2, 2, (1, 4))), "t": ((), rng.uniform(-2, 2, (1, 2)))} for _ in range(8)]
    runs = []
    for graph in (hosted, on_device):
        runner = run_host(CpuDevice(place(graph), FIXED, muf=4), instances, 3)
        assert runner.host.conservation_report() == [] and runner.device.engine.conservation_report() == []
        grads = [m.payload.tobytes() for m in runner.received if m.kind is Kind.GRADS]
        losses = sorted((r.tag.key, np.asarray(r.report).tobytes()) for r in runner.drain_losses())
        runs.append((grads, losses))
    assert runs[0] == runs[1] and len(runs[0][1]) == 8 and len(runs[0][0]) == 2


def test_a_loop_of_host_routers_fed_by_sources_leaves_the_gradient_unused() -> None:
    g = Graph("loop")
    merged = g.phi(g.source("x", width=4), arity=2, name="merge")
    again, out = g.cond(g.isu(merged, inc(0), name="step"), S[0] < 3, name="again")
    g.feed(merged, again)
    g.loss(g.linear(out, 2, name="fc"), g.source("t", width=2), "mse", name="loss")
    for name in ("merge", "step", "again"):
        g.node(name).placement = "host"
    assert gradient_unused(g.validate(), "again") and dx_skipped(place(g)) == {"fc"}


def _train(graph: Graph, n: int = 24) -> tuple[dict, list, HostRunner]:
    """tree-rnn's instances through the numpy device model at muf 4: per node, the messages its
    GRADS dumps counted and their sums; per tree, its loss report and prediction; the runner."""
    spec = MODELS["tree-rnn"]
    placement = place(graph)
    runner = run_host(CpuDevice(placement, FIXED, muf=4), sample_inputs(graph, n, 0, spec), 6)
    counts: Counter = Counter()
    totals: dict[str, np.ndarray] = {}
    for m in runner.received:
        if m.kind is Kind.GRADS:
            node = placement.channel(m.channel).node
            totals[node] = totals.get(node, 0) + m.payload
            counts[node] += int(m.tag.state[1])
    losses = sorted((r.tag.key, np.asarray(r.report).tobytes(), r.prediction.tobytes()) for r in runner.drain_losses())
    return {k: (counts[k], totals[k].tobytes()) for k in counts}, losses, runner


def test_tree_rnn_trains_the_same_with_its_leaf_routers_on_the_host() -> None:
    hosted = MODELS["tree-rnn"].build()
    placement = place(hosted)
    assert set(LEAF_ROUTERS) <= set(placement.host_nodes) and dx_skipped(placement) == {"embed"}
    on_device = build_tree_rnn(routers="device")
    assert dx_skipped(place(on_device)) == frozenset()

    grads_hosted, losses_hosted, runner = _train(hosted)
    grads_device, losses_device, _ = _train(on_device)
    assert len(losses_hosted) == 24 and grads_hosted == grads_device and losses_hosted == losses_device
    assert set(grads_hosted) == {"embed", "compose", "head"}
    embed_in = placement.edge_channel(hosted.edge_into("embed", 0)).channel
    assert not [m for m in runner.received if m.channel == embed_in]  # no dx crosses back
    assert runner.host.conservation_report() == [] and runner.device.engine.conservation_report() == []
    assert all(runner.host.kernels[f"leaf{j}"].completed == 24 for j in range(12))
