"""The C simulation of the generated HLS C++ is bit-exact with the numpy fixed-point device model.

Every case runs the same instances through a ``HostRunner`` twice: once with ``CpuDevice`` (the
numpy kernels, the golden reference) and once with ``CsimDevice`` (the generated kernels built
with g++), loading the same weights. Then, per boundary channel, everything the device sent
(forward outputs, gradients back to the host, GRADS dumps) must be equal message for message,
the host's loss records equal, both host engines clean (conservation), and the saturation counts
of the two devices equal. With several instances in flight (mak > 1) the two devices may
interleave instances differently, so a channel's messages are compared per tag and its GRADS
dumps by their total (see ``_check_bit_exact``).

Each node kind is tested alone (one device node; a helper node the host runs where the kind
needs one, e.g. a Group after an Ungroup) with values that saturate, then combined in a pipeline
with a Linear (muf > 1: GRADS dumps), then the mlp and list-rnn models, at mak 1 and 4. Data
payloads are Q16.10 ([-32, 32)) and gradients Q16.12 ([-8, 8)): the random values are wide enough
that sums, products and the host's loss gradients saturate.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.hls import HlsProject
from amp_hls.codegen.project import write_project
from amp_hls.design import DeviceOptions, build_design
from amp_hls.host import CpuDevice, DeviceError
from amp_hls.host.csim import CompileError, CsimDevice, build_csim
from amp_hls.host.runner import HostRunner
from amp_hls.ir import Graph, IsuOp, S, dec, inc, parent, pop, push
from amp_hls.ir.nodes import Predicate
from amp_hls.kernels.host import LossKernel
from amp_hls.message import Direction, Tag
from amp_hls.models import MODELS, Inputs
from amp_hls.wire import Kind, WireMessage
from tests.helpers import FIXED, run_host

pytestmark = [pytest.mark.gxx,
              pytest.mark.skipif(shutil.which("g++") is None, reason="C simulation needs g++")]


# --- the cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A graph, the nodes the host runs besides sources and losses, and how to make instances."""

    build: Callable[[], Graph]
    instances: Callable[[Graph, np.random.Generator, int], list[Inputs]]
    on_host: tuple[str, ...] = ()
    muf: int = 1
    n: int = 12

    def graph(self) -> Graph:
        g = self.build()
        for name in self.on_host:
            g.node(name).placement = "host"
        return g


def _values(rng: np.random.Generator, rows: int, width: int, scale: float = 20.0) -> np.ndarray:
    return rng.uniform(-scale, scale, (rows, width))


def _each(make: Callable[[Graph, np.random.Generator], Inputs]):  # type: ignore[no-untyped-def]
    return lambda g, rng, n: [make(g, rng) for _ in range(n)]


def _join_graph(kind: str, widths: tuple[int, ...], rows: int = 3) -> Callable[[], Graph]:
    def build() -> Graph:
        g = Graph(f"{kind}_alone")
        xs = [g.source(f"x{i}", width=w, max_rows=rows) for i, w in enumerate(widths)]
        y = getattr(g, kind)(*xs, name="node")
        g.loss(y, g.source("target", width=y.width, max_rows=rows), "mse", name="loss")
        return g

    return build


def _join_inputs(widths: tuple[int, ...], target: int, scale: float, rows: int = 3):  # type: ignore[no-untyped-def]
    def make(g: Graph, rng: np.random.Generator) -> Inputs:
        r = int(rng.integers(1, rows + 1))
        inputs = {f"x{i}": ((), _values(rng, r, w, scale)) for i, w in enumerate(widths)}
        inputs["target"] = ((), _values(rng, r, target, scale))
        return inputs

    return _each(make)


def _split_graph() -> Graph:
    g = Graph("split_alone")
    a, b = g.split(g.source("x", width=8, max_rows=2), (3, 5), name="node")
    g.loss(a, g.source("ta", width=3, max_rows=2), "mse", name="la")
    g.loss(b, g.source("tb", width=5, max_rows=2), "mse", name="lb")
    return g


def _split_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    r = int(rng.integers(1, 3))
    return {"x": ((), _values(rng, r, 8)), "ta": ((), _values(rng, r, 3)), "tb": ((), _values(rng, r, 5))}


def _broadcast_graph() -> Graph:
    g = Graph("broadcast")
    copies = g.broadcast(g.source("x", width=4, max_rows=2), 3, name="node")
    for i, y in enumerate(copies):
        g.loss(y, g.source(f"t{i}", width=4, max_rows=2), "mse", name=f"l{i}")
    return g


def _broadcast_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    r = int(rng.integers(1, 3))
    return {"x": ((), _values(rng, r, 4)), **{f"t{i}": ((), _values(rng, r, 4, 30.0)) for i in range(3)}}


def _broadcast_index_graph() -> Graph:
    """A label shared by two classifiers: the broadcast's gradient is zeros, whatever arrives."""
    g = Graph("broadcast_index")
    labels = g.broadcast(g.source("label", width=1, dtype="index"), 2, name="node")
    for i, label in enumerate(labels):
        g.loss(g.source(f"p{i}", width=4), label, "softmax_ce", name=f"l{i}")
    return g


def _broadcast_index_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    return {"label": ((), np.array([[rng.integers(0, 4)]])), **{f"p{i}": ((), _values(rng, 1, 4, 4.0)) for i in range(2)}}


def _branch_graph(predicate: Predicate) -> Callable[[], Graph]:
    """x -> cond -> (taken, not taken) -> phi -> mse: one of cond/phi on the device, one on the host."""

    def build() -> Graph:
        g = Graph("branch")
        taken, other = g.cond(g.source("x", width=3, max_rows=2), predicate, name="cond")
        y = g.phi(taken, other, name="phi")
        g.loss(y, g.source("target", width=3, max_rows=2), "mse", name="loss")
        return g

    return build


def _branch_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    state = tuple(int(v) for v in rng.integers(0, 6, 2))
    r = int(rng.integers(1, 3))
    return {"x": (state, _values(rng, r, 3)), "target": (state, _values(rng, r, 3))}


def _isu_graph(ops: tuple[IsuOp, ...]) -> Callable[[], Graph]:
    def build() -> Graph:
        g = Graph("isu")
        y = g.isu(g.source("x", width=3), *ops, name="node")
        g.loss(y, g.source("target", width=3), "mse", name="loss")
        return g

    return build


def _isu_inputs(ops: tuple[IsuOp, ...], make_state: Callable[[np.random.Generator], tuple[int, ...]]):  # type: ignore[no-untyped-def]
    def make(g: Graph, rng: np.random.Generator) -> Inputs:
        state = make_state(rng)
        out = state
        for op in ops:
            out = op.apply(out)
        return {"x": (state, _values(rng, 1, 3)), "target": (out, _values(rng, 1, 3))}

    return _each(make)


CLIMB = (inc(0, 2), push(7), parent(0))  # (p, q) -> ((p + 1) // 2, q, 7, (p + 1) % 2)
DESCEND = (IsuOp("child", 0, 0), pop(4), dec(0, 3))  # (a, 4, bit) -> (2a + bit - 2,)


def _rows_graph() -> Graph:
    """x -> ungroup -> group -> mse: one of ungroup/group on the device, one on the host."""
    g = Graph("rows")
    y = g.group(g.ungroup(g.source("x", width=3, max_rows=4), name="ungroup"), 4, name="group")
    g.loss(y, g.source("target", width=3, max_rows=4), "mse", name="loss")
    return g


def _rows_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    state = (int(rng.integers(0, 100)),)
    r = int(rng.integers(1, 5))
    return {"x": (state, _values(rng, r, 3)), "target": (state, _values(rng, r, 3))}


def _graph_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    n = int(rng.integers(1, 6))
    e = int(rng.integers(1, 9))
    edges = rng.integers(0, n, (e, 2))
    return {"x": ((), _values(rng, n, 3)), "edges": ((), edges), "target": ((), _values(rng, n, 3))}


def _aggregate_graph() -> Graph:
    g = Graph("aggregate")
    y = g.aggregate(g.source("x", width=3, max_rows=5), g.source("edges", width=2, max_rows=8, dtype="index"), name="node")
    g.loss(y, g.source("target", width=3, max_rows=5), "mse", name="loss")
    return g


def _rowsum_graph() -> Graph:
    g = Graph("rowsum")
    y = g.rowsum(g.source("x", width=4, max_rows=5), name="node")
    g.loss(y, g.source("target", width=4), "mse", name="loss")
    return g


def _rowsum_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    return {"x": ((), _values(rng, int(rng.integers(1, 6)), 4)), "target": ((), _values(rng, 1, 4))}


def _pipeline_graph() -> Graph:
    """Every row-moving kind around a Linear: node states through a shared layer, message passing,
    a readout. Gradients reach every node (no host helper), and the Linear dumps GRADS."""
    g = Graph("pipeline")
    x = g.source("x", width=3, max_rows=5)
    h = g.group(g.tanh(g.linear(g.ungroup(x, name="ungroup"), 4, name="fc"), name="act"), 5, name="group")
    h = g.aggregate(h, g.source("edges", width=2, max_rows=8, dtype="index"), name="agg")
    g.loss(g.rowsum(h, name="readout"), g.source("target", width=4), "mse", name="loss")
    return g


def _linear_rows_graph() -> Graph:
    """Linears above their input width (``Linear.outputs_per_step``): 2 rows of W a step (10
    inputs, 12 lanes), 4 without bias, 4 with; their C++ walks the outputs that many at a time."""
    g = Graph("linear_rows")
    h = g.linear(g.source("x", width=10, max_rows=3), 8, name="fg", parallelism=24)
    h = g.linear(g.tanh(h, name="act"), 12, bias=False, name="fh", parallelism=32)
    h = g.linear(h, 8, name="fi", parallelism=48)
    g.loss(h, g.source("target", width=8, max_rows=3), "mse", name="loss")
    return g


def _linear_rows_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    r = int(rng.integers(1, 4))
    return {"x": ((), _values(rng, r, 10)), "target": ((), _values(rng, r, 8))}


def _pipeline_inputs(g: Graph, rng: np.random.Generator) -> Inputs:
    inputs = _graph_inputs(g, rng)
    inputs["target"] = ((), _values(rng, 1, 4, 4.0))
    return inputs


def _model_case(model: str, n: int) -> Case:
    entry = MODELS[model]
    examples = entry.data(0).train[:n]
    return Case(entry.build, lambda g, rng, k: [entry.inputs(e) for e in examples[:k]], muf=4, n=n)


ADD3 = (4, 4, 4)
CASES: dict[str, Case] = {
    "add": Case(_join_graph("add", ADD3), _join_inputs(ADD3, 4, 20.0)),
    "mul": Case(_join_graph("mul", ADD3), _join_inputs(ADD3, 4, 6.0)),
    "concat": Case(_join_graph("concat", (3, 5)), _join_inputs((3, 5), 8, 20.0)),
    "split": Case(_split_graph, _each(_split_inputs)),
    "broadcast": Case(_broadcast_graph, _each(_broadcast_inputs)),
    "broadcast_index": Case(_broadcast_index_graph, _each(_broadcast_index_inputs)),
    "cond_lt_state": Case(_branch_graph(S[0] < S[1]), _each(_branch_inputs), on_host=("phi",)),
    "cond_eq_const": Case(_branch_graph(S[1] == 3), _each(_branch_inputs), on_host=("phi",)),
    "cond_ge_zero": Case(_branch_graph(S[0] >= 0), _each(_branch_inputs), on_host=("phi",)),
    "phi": Case(_branch_graph(S[0] < S[1]), _each(_branch_inputs), on_host=("cond",)),
    "isu_climb": Case(_isu_graph(CLIMB), _isu_inputs(CLIMB, lambda r: tuple(int(v) for v in r.integers(0, 50, 2)))),
    "isu_descend": Case(
        _isu_graph(DESCEND), _isu_inputs(DESCEND, lambda r: (int(r.integers(1, 50)), 4, int(r.integers(0, 2))))
    ),
    "ungroup": Case(_rows_graph, _each(_rows_inputs), on_host=("group",)),
    "group": Case(_rows_graph, _each(_rows_inputs), on_host=("ungroup",)),
    "aggregate": Case(_aggregate_graph, _each(_graph_inputs)),
    "rowsum": Case(_rowsum_graph, _each(_rowsum_inputs)),
    "pipeline": Case(_pipeline_graph, _each(_pipeline_inputs), muf=3, n=12),  # 36 rows: 12 dumps
    "linear_rows": Case(_linear_rows_graph, _each(_linear_rows_inputs), muf=3, n=12),  # 4 dumps each
    "mlp": _model_case("mlp", 16),  # 16 backward messages per Linear: 4 dumps each
    "list-rnn": _model_case("list-rnn", 12),  # 116 steps of the cell, 12 of the head
    "tree-rnn": _model_case("tree-rnn", 8),  # its leaf routers on the host: embed runs no dx
}
WHOLE_GRAPHS = ("pipeline", "linear_rows", "mlp", "list-rnn")
KIND_CASES = [name for name in CASES if name not in (*WHOLE_GRAPHS, "tree-rnn")]
# Cases built again with a single tag-table entry per table, so tables fill and hold messages back.
ONE_SLOT = ("mul", "split", "group", "phi")


# --- building (once per module, in parallel) -----------------------------------------------------


class _Projects:
    """Every case's project, generated up front and compiled in the background (g++ in parallel,
    in test order); a test waits only for the projects it uses."""

    def __init__(self, root: Path):
        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
        self.entries: dict[str, tuple[Graph, HlsProject, Future]] = {}
        specs = [(name, case, DeviceOptions(muf=case.muf)) for name, case in CASES.items()]
        specs += [(f"{name}/1", CASES[name], DeviceOptions(cache_slots=1)) for name in ONE_SLOT]
        for name, case, options in specs:
            graph = case.graph()
            project = write_project(build_design(graph, options), root / name.replace("/", "_"), rtl=False)
            self.entries[name] = (graph, project, self.pool.submit(build_csim, project))

    def __getitem__(self, name: str) -> tuple[Graph, HlsProject]:
        graph, project, built = self.entries[name]
        built.result()
        return graph, project

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    built = _Projects(tmp_path_factory.mktemp("csim"))
    yield built
    built.close()


# --- running and comparing -----------------------------------------------------------------------


def _run(graph: Graph, device, instances: list[Inputs], mak: int) -> HostRunner:  # type: ignore[no-untyped-def]
    return run_host(device, instances, mak, weights_of=graph, seed=3, weights_seed=11)


def _by_channel(msgs: list[WireMessage]) -> dict[tuple[int, Kind, Direction], list[WireMessage]]:
    out: dict[tuple[int, Kind, Direction], list[WireMessage]] = defaultdict(list)
    for m in msgs:
        out[(m.channel, m.kind, m.direction)].append(m)
    return out


def _tag_order(m: WireMessage) -> tuple[int, tuple[int, ...]]:
    return (m.tag.key, m.tag.state)


def _loss_records(runner: HostRunner) -> list[tuple]:
    """Every loss record, in tag order (the host evaluates instances as they come back)."""
    records = []
    for name, kernel in runner.host.kernels.items():
        if isinstance(kernel, LossKernel):
            records += [(name, r.tag, r.loss, r.prediction.tobytes(), np.asarray(r.target).tobytes()) for r in kernel.results]
    return sorted(records, key=lambda r: (r[0], r[1]))


def _check_bit_exact(name: str, projects, mak: int, seed: int = 0, project_name: str | None = None,  # type: ignore[no-untyped-def]
                     in_order: bool | None = None):
    """Run both devices and compare. ``in_order`` (default: mak == 1) holds every channel to one
    message order; it holds only while an instance has one path through the graph at a time."""
    case = CASES[name]
    in_order = mak == 1 if in_order is None else in_order
    graph, project = projects[project_name or name]
    instances = case.instances(graph, np.random.default_rng(seed), case.n)
    cpu = CpuDevice(project.placement, FIXED, muf=case.muf)
    csim = CsimDevice(project)
    want, got = _run(graph, cpu, instances, mak), _run(graph, csim, instances, mak)

    expected, actual = _by_channel(want.received), _by_channel(got.received)
    assert expected.keys() == actual.keys()
    for channel, msgs in expected.items():
        assert len(actual[channel]) == len(msgs), channel
        others = actual[channel]
        where = f"{project.placement.channel(channel[0]).name} {channel[1].name} {channel[2].name}"
        if not in_order:
            # Instances in flight interleave differently on the two devices (the numpy engine
            # serves inboxes in a seeded random order, the C simulation round robin), so messages
            # of different tags may leave a channel in another order, and a GRADS dump may sum
            # the gradients of other messages. What each tag carries must not change, nor the
            # total of the dumps: the weights stay fixed during a run, and the case leaves no
            # gradient behind in an accumulator (its backward count is a multiple of muf).
            if channel[1] is Kind.GRADS:
                node = project.placement.channel(channel[0]).node
                assert cpu.engine.counts[node].bwd_in % case.muf == 0, f"{where}: pick n so no gradient is left over"
                assert [m.tag for m in msgs] == [m.tag for m in others], where
                total = sum(m.payload for m in msgs)
                assert np.array_equal(total, sum(m.payload for m in others)), where
                continue
            msgs, others = sorted(msgs, key=_tag_order), sorted(others, key=_tag_order)
        for i, (a, b) in enumerate(zip(msgs, others, strict=True)):
            assert a == b, f"{where} message {i}: {a} != {b}"
    assert _loss_records(want) == _loss_records(got)
    assert want.host.conservation_report() == []
    assert got.host.conservation_report() == []
    assert cpu.engine.conservation_report() == []
    assert csim.saturations == cpu.engine.counter.total
    return cpu, want


@pytest.mark.parametrize("name", KIND_CASES)
def test_each_kind_alone_is_bit_exact(projects, name):
    cpu, runner = _check_bit_exact(name, projects, mak=1)
    assert runner.received, "the device sent nothing"
    if name in ("add", "mul", "broadcast", "aggregate", "rowsum"):
        assert cpu.engine.counter.total > 0, "no value saturated: the case does not test saturation"


@pytest.mark.parametrize("name", KIND_CASES)
def test_each_kind_alone_is_bit_exact_with_instances_in_flight(projects, name):
    _check_bit_exact(name, projects, mak=4, seed=1)


@pytest.mark.parametrize("mak", [1, 4])
@pytest.mark.parametrize("name", WHOLE_GRAPHS)
def test_whole_graphs_are_bit_exact_with_gradient_dumps(projects, name, mak):
    cpu, runner = _check_bit_exact(name, projects, mak=mak)
    dumps = [m for m in runner.received if m.kind is Kind.GRADS]
    assert dumps and cpu.counters.grads_dumps == len(dumps)


def test_tree_rnn_with_its_leaf_routers_on_the_host_is_bit_exact(projects):
    """The generated kernels of a device fed by host routers (``design.skips_dx``: embed sends no
    dx, the host answers it) send what the numpy device model sends, message for message, one
    tree in flight: a tree's gradient count per Linear is not a multiple of muf, so only an
    in-order run compares the dumps whole."""
    graph, project = projects["tree-rnn"]
    assert [n for n, k in project.design.nodes.items() if k.skip_dx] == ["embed"]
    _, runner = _check_bit_exact("tree-rnn", projects, mak=1)
    embed_in = project.placement.edge_channel(graph.edge_into("embed", 0)).channel
    assert not [m for m in runner.received if m.channel == embed_in]


@pytest.mark.parametrize("name", ONE_SLOT)
def test_full_tag_tables_hold_messages_back(projects, name):
    """With one entry per table and four instances in flight, joins, gathers and caches must
    leave new tags waiting in their streams (back-pressure), never fail or reorder a tag."""
    _check_bit_exact(name, projects, mak=4, project_name=f"{name}/1")


# --- errors --------------------------------------------------------------------------------------


def test_a_backward_for_an_unknown_tag_reports_the_kernels_message(projects):
    graph, project = projects["mlp"]
    csim = CsimDevice(project)
    ch = project.placement.edge_channel(graph.edge_into("xent", 0))
    csim.send([WireMessage(ch.channel, Kind.DATA, Direction.BWD, Tag(99, ()), np.zeros((1, 10), np.int64))])
    with pytest.raises(DeviceError, match="head: no forward entry for this tag"):
        csim.recv()
    csim.reset()
    assert csim.recv() == []


def _bad_edges(inputs: Inputs) -> Inputs:
    x = inputs["x"][1]
    return {**inputs, "edges": ((), np.array([[0, len(x)]]))}


BAD_INSTANCES = {
    # case: (what breaks the instance, the C simulation's message)
    "aggregate": (_bad_edges, r"node: edge endpoint outside \[0, n\)"),
    "isu_climb": (lambda i: {**i, "x": ((65534, 0), i["x"][1])}, r"node: inc S\[0\] by 2: the state word leaves 16 bits"),
    "isu_descend": (lambda i: {**i, "x": ((1, 5, 0), i["x"][1])}, "node: pop 4: the state does not end in 4"),
    "cond_lt_state": (lambda i: {**i, "x": ((1,), i["x"][1])}, r"cond: predicate S\[0\] < S\[1\] reads a state word the tag lacks"),
    "ungroup": (lambda i: {**i, "x": ((1, 2, 3), i["x"][1])}, r"ungroup: no room on the state for a row index"),
    "concat": (lambda i: {**i, "x0": ((), np.zeros((2, 3))), "x1": ((), np.zeros((1, 5)))}, "node: joined messages of one tag differ in rows"),
}


@pytest.mark.parametrize("name", BAD_INSTANCES)
def test_a_bad_instance_fails_on_both_devices_with_the_kernels_message(projects, name):
    case = CASES[name]
    graph, project = projects[name]
    breaks, message = BAD_INSTANCES[name]
    bad = breaks(case.instances(graph, np.random.default_rng(0), 1)[0])
    with pytest.raises(DeviceError):  # both backends raise the same error type
        _run(graph, CpuDevice(project.placement, FIXED), [bad], mak=1)
    with pytest.raises(DeviceError, match=message):
        _run(graph, CsimDevice(project), [bad], mak=1)


def test_a_compile_error_surfaces_the_compilers_message(projects, tmp_path):
    _, project = projects["add"]
    root = tmp_path / "broken"
    shutil.copytree(project.root, root, ignore=shutil.ignore_patterns("build"))
    kernel = root / "kernels" / "k_node.cpp"
    kernel.write_text(kernel.read_text().replace("free_entry(slot);", "free_entry(slot)", 1))
    files = tuple(root / "kernels" / f.name for f in project.kernel_files)
    with pytest.raises(CompileError, match=r"k_node\.cpp:\d+:\d+: error: expected"):
        build_csim(HlsProject(root, project.design, files))
