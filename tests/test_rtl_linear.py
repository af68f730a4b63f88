"""The RTL Linear kernel agrees with the numpy device model bit for bit, and with its cycle model.

One graph holds seven Linear nodes that cover the kernel's shapes: 10, 4, 8 and 3 MACs per cycle
(a word of a whole row, one beat, two beats, and words that straddle beats), with and without
bias, input widths 10, 5, 11 and 8 (every remainder modulo the 4 elements per beat; with 8 and a
bias, the bias has a WEIGHTS beat to itself), and rows = 1..3; and three above their input width
(``Linear.outputs_per_step``): 2 outputs a step of 10 inputs padded to 12 lanes, 4 of 8 without
bias, 4 of 12. Two more nodes have the shapes of
the model zoo's MLP layers, for its efficiency. They are built
once under Verilator in one harness (``amp_hls.sim.runner``, cached by source hash), with a tag cache of
4 entries and a GRADS dump every 2 backward messages.

Bit-exact (``amp_hls.sim.linear_tb``, random TVALID/TREADY stalls on all six streams): two phases, each a
WEIGHTS load (key = version) followed by forwards of several tags (some sharing a key) and their
gradients, sent back in random order as the forwards come out, more messages than cache entries.
Forward, backward and GRADS (tag and payload) outputs must equal the numpy kernel's
(``LinearKernel``, ``NumericConfig('fixed')``, backwards replayed in the order the RTL took them,
dumps packed with ``placement.pack_params`` as ``host.cpu.CpuDevice`` does), one output per input
(conservation). Half the values span the whole 16-bit range, so forward and backward saturate.

Timing (no stalls): per node and rows, the cycles per WEIGHTS, forward and backward message
(GRADS dumps amortised) must be within 15% of ``amp_hls.cycles.linear``.

The harness's sources feed activations, so every node computes dx (a Linear fed straight by a
source skips it: ``design.skips_dx``, checked here on the numpy device model and host runner, and
on the RTL and C++ by test_rtl_top and test_csim). GRADS dumps count what they sum, which the
parameter server scales by (``wire.GRADS_STATE``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.rtl import HARNESS, generate_rtl
from amp_hls.cycles import message_cycles
from amp_hls.design import DeviceOptions, build_design
from amp_hls.ir import LIMITS, Graph
from amp_hls.kernels import LinearKernel
from amp_hls.message import Direction, Message, Tag
from amp_hls.models.mlp import ENTRIES
from amp_hls.numerics import SaturationCounter
from amp_hls.placement import pack_params, unpack_params
from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage, encode_beats
from tests.helpers import FIXED, distinct_tags

runner = pytest.importorskip("amp_hls.sim.runner")
pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

MAX_ROWS, SLOTS, MUF = 3, 4, 2
NODES = ("fa", "fb", "fc", "fd", "fg", "fh", "fi", "fj", "fk")
MLP = ("fe", "ff")
OPTIONS = DeviceOptions(numerics=FIXED, cache_slots=SLOTS, muf=MUF)
ENGINE = dataclasses.replace(OPTIONS, dump_engine=True)  # the kernels with the dump engine


def _graph() -> Graph:
    g = Graph("rtl_linear")
    # the sources feed activations: a Linear fed straight by a source sends no dx (design.skips_dx)
    h = g.tanh(g.source("x", width=10, max_rows=MAX_ROWS), name="xa")
    h = g.linear(h, 5, name="fa", parallelism=10)  # one word a row, P not a multiple of a beat
    h = g.linear(h, 11, bias=False, name="fb", parallelism=4)
    h = g.linear(h, 8, name="fc", parallelism=8)
    h = g.linear(h, 3, name="fd", parallelism=3)
    g.loss(h, g.source("t", width=3, max_rows=MAX_ROWS), "mse")
    # above the input width (Linear.outputs_per_step): 2 rows of 12 lanes (10 inputs and padding),
    # 4 rows of 8 without bias, 4 rows of 12 (the bias a WEIGHTS beat of its own)
    h = g.tanh(g.source("x3", width=10, max_rows=MAX_ROWS), name="xg")
    h = g.linear(h, 8, name="fg", parallelism=24)
    h = g.linear(h, 12, bias=False, name="fh", parallelism=32)
    h = g.linear(h, 8, name="fi", parallelism=48)
    g.loss(h, g.source("t3", width=8, max_rows=MAX_ROWS), "mse")
    # one word of 48 lanes: the dx's last word leaves in 12 beats, beside the dW loop (16 outputs:
    # a backward that waited for them took 22% more), or longer than it (2 outputs)
    x4 = g.tanh(g.source("x4", width=48, max_rows=MAX_ROWS), name="xj")
    g.loss(g.linear(x4, 2, name="fj", parallelism=48), g.source("t4", width=2, max_rows=MAX_ROWS), "mse")
    x5 = g.tanh(g.source("x5", width=48, max_rows=MAX_ROWS), name="xk")
    g.loss(g.linear(x5, 16, name="fk", parallelism=48), g.source("t5", width=16, max_rows=MAX_ROWS), "mse")
    # the MLP's layers (models.mlp, 64 -> 32 -> 10, rows = 1), MACs shared out by work
    h = g.linear(g.tanh(g.source("x2", width=64), name="xe"), 32, name="fe", parallelism=8)
    h = g.linear(h, 10, name="ff", parallelism=1)
    g.loss(h, g.source("t2", width=10), "mse")
    return g


def _build(tmp_path_factory: pytest.TempPathFactory, options: DeviceOptions) -> tuple[Graph, Path]:
    g = _graph()
    root = tmp_path_factory.mktemp("rtl_linear")
    files = generate_rtl(build_design(g, options), [*NODES, *MLP], root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The graph and the one Verilator build of its Linear kernels."""
    return _build(tmp_path_factory, OPTIONS)


@pytest.fixture(scope="session")
def engine_harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The same kernels with the dump engine (``ENGINE``)."""
    return _build(tmp_path_factory, ENGINE)


def _values(rng: np.random.Generator, shape: tuple[int, ...], small: int) -> list[list[int]]:
    """Half the elements within +-``small``, half over the whole 16-bit range (they saturate)."""
    wide = rng.integers(-(2**15), 2**15, shape)
    return np.where(rng.random(shape) < 0.5, rng.integers(-small, small, shape), wide).tolist()


def _phase(rng: np.random.Generator, node, version: int, n: int, rows: int | None = None) -> dict:  # type: ignore[no-untyped-def]
    """A WEIGHTS message then ``n`` forwards and their gradients (``rows`` None: random rows)."""
    pw = node.in_features + int(node.bias)
    fwd = []
    for t in distinct_tags(rng, n):
        r = rows or int(rng.integers(1, MAX_ROWS + 1))
        fwd.append({"key": t.key, "state": list(t.state), "payload": _values(rng, (r, node.in_features), 2**10)})
    grads = [dict(d, payload=_values(rng, (len(d["payload"]), node.out_features), 2**12)) for d in fwd]
    weights = {"key": version, "state": [], "payload": _values(rng, (node.out_features, pw), 2**12)}
    return {"weights": weights, "fwd": fwd, "grads": grads}


def _run(harness: tuple[Graph, Path], tmp_path: Path, name: str, phases: list[dict], timing: bool,
         expect_error: bool = False, muf: int = MUF) -> dict:
    g, build_dir = harness
    node = g.nodes[name]
    stim = {"prefix": f"{name}_", "seed": sum(map(ord, name)), "stall": 0.0 if timing else 0.3,
            "timing": timing, "muf": muf, "max_rows": g.input_spec(name, 0).max_rows, "in_width": node.in_features,
            "out_width": node.out_features, "params_width": node.in_features + int(node.bias),
            "phases": phases, "expect_error": int(expect_error)}
    (tmp_path / "stim.json").write_text(json.dumps(stim))
    env = {"AMP_SIM_STIMULUS": str(tmp_path / "stim.json"), "AMP_SIM_RESULT": str(tmp_path / "result.json")}
    runner.run(build_dir, HARNESS, "amp_hls.sim.linear_tb", tmp_path / "run", env)
    return json.loads((tmp_path / "result.json").read_text())


def _tag(doc: dict) -> Tag:
    return Tag(doc["key"], tuple(doc["state"]))


def _golden(g: Graph, name: str, phases: list[dict], result: dict, counter: SaturationCounter,
            muf: int = MUF) -> tuple:
    """What the numpy kernel sends: forward and backward payloads by tag per phase, and the
    GRADS dumps as (key, state, rows), backwards taken in the order the RTL took them."""
    node = g.nodes[name]
    kernel = LinearKernel(node, g, FIXED, counter)
    fwd, bwd, dumps = [], [], []
    for phase, got in zip(phases, result["phases"]):
        w = phase["weights"]
        kernel.load_quantized(unpack_params(node, np.array(w["payload"], dtype=np.int64)), version=w["key"])
        want_fwd, want_bwd = {}, {}
        for d in phase["fwd"]:
            ((_, y),) = kernel.forward(0, [Message(_tag(d), Direction.FWD, np.array(d["payload"]))])
            want_fwd[y.tag] = y.payload.tolist()
        grads = {_tag(d): d for d in phase["grads"]}
        for t in map(_tag, got["order"]):
            ((_, dx),) = kernel.backward(0, [Message(t, Direction.BWD, np.array(grads[t]["payload"]))])
            want_bwd[t] = dx.payload.tolist()
            if kernel.n_grads >= muf:  # as host.cpu.CpuDevice dumps
                state = [kernel.version & 0xFFFF, kernel.n_grads]  # wire.GRADS_STATE: version, count
                dumps.append((len(dumps), state, pack_params(node, kernel.grads).tolist()))
                kernel.zero_grads()
        fwd.append(want_fwd)
        bwd.append(want_bwd)
    assert kernel.pending() == 0
    return fwd, bwd, dumps


def _bit_exact(harness: tuple[Graph, Path], tmp_path: Path, name: str, muf: int) -> None:
    g, _ = harness
    node = g.nodes[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    phases = [_phase(rng, node, 5, 10), _phase(rng, node, 70000, 6)]  # versions beyond 16 bits wrap
    result = _run(harness, tmp_path, name, phases, timing=False, muf=muf)
    counter = SaturationCounter()
    want_fwd, want_bwd, want_dumps = _golden(g, name, phases, result, counter, muf)

    for i, (phase, got) in enumerate(zip(phases, result["phases"])):
        for what, want in (("fwd", want_fwd[i]), ("bwd", want_bwd[i])):
            out = {_tag(m): m["payload"] for m in got[what]}
            assert len(got[what]) == len(phase["fwd"]) and out.keys() == want.keys(), f"{what}: lost or duplicated"
            for tag, payload in want.items():
                assert out[tag] == payload, f"{name} phase {i} {what} {tag}: RTL {out[tag]} != numpy {payload}"
        assert [m["key"] for m in got["fwd"]] == [d["key"] for d in phase["fwd"]], "forward order changed"
    got_dumps = [(d["key"], d["state"], d["payload"]) for d in result["dumps"]]
    assert len(got_dumps) == len(want_dumps) == 16 // muf
    for got_d, want_d in zip(got_dumps, want_dumps):
        assert got_d == want_d, f"{name} GRADS dump {want_d[0]}: RTL {got_d} != numpy {want_d}"
    sites = counter.as_dict()
    assert sites.get(f"{name}.fwd") and sites.get(f"{name}.bwd"), f"no saturation exercised: {sites}"


@pytest.mark.parametrize("name", NODES)
def test_linear_bit_exact(name: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    _bit_exact(harness, tmp_path, name, MUF)


@pytest.mark.parametrize("name", NODES)
def test_linear_bit_exact_with_the_dump_engine(name: str, engine_harness: tuple[Graph, Path], tmp_path: Path) -> None:
    """The same under stalls with G copied into the dump buffer: each dump as the numpy kernel's,
    its weights version taken when it was due (a WEIGHTS load may come while it streams out); fa,
    at parallelism 1, dumps inline (``design.has_dump_engine``)."""
    _bit_exact(engine_harness, tmp_path, name, ENGINE.muf)


def test_a_linear_at_the_largest_parallelism_is_bit_exact(tmp_path_factory: pytest.TempPathFactory,
                                                          tmp_path: Path) -> None:
    """``LIMITS.max_parallelism`` MACs (4 rows of 64 inputs a step) under stalls: its G word, 12,288
    bits, is zero-filled by a replication past Verilator's default limit (``codegen.rtl.REPLICATION_LIMIT``)."""
    g = Graph("rtl_linear_wide")
    h = g.tanh(g.source("x", width=64, max_rows=MAX_ROWS), name="act")
    g.loss(g.linear(h, 4, name="fw", parallelism=LIMITS.max_parallelism), g.source("t", width=4, max_rows=MAX_ROWS), "mse")
    assert g.nodes["fw"].outputs_per_step == 4
    root = tmp_path_factory.mktemp("rtl_linear_wide")
    files = generate_rtl(build_design(g, OPTIONS), ["fw"], root / "src")
    _bit_exact((g, runner.build(files.sources, HARNESS, root / "cache")), tmp_path, "fw", MUF)


def test_linear_drops_bad_messages(harness: tuple[Graph, Path], tmp_path: Path) -> None:
    """A gradient for a tag never seen, a WEIGHTS message with too few rows and a forward with too
    many set amp_error and are dropped whole: no output for them, the weights and their version
    unchanged, and the messages after them bit-exact."""
    g, _ = harness
    name = "fd"
    node = g.nodes[name]
    rng = np.random.default_rng(3)
    phase = _phase(rng, node, 21, 4)
    pw, width = node.in_features + int(node.bias), node.out_features
    loose = ChannelMap([ChannelSpec(0, "any", {Kind.DATA: Shape(node.in_features, 8), Kind.WEIGHTS: Shape(pw, 8)}),
                        ChannelSpec(1, "dy", {Kind.DATA: Shape(width, 8)})])
    bad = [
        ("out0_grad", WireMessage(1, Kind.DATA, Direction.BWD, Tag(123, (4,)), np.ones((1, width), np.int64))),
        ("params", WireMessage(0, Kind.WEIGHTS, Direction.FWD, Tag(99, ()), np.ones((width - 1, pw), np.int64))),
        ("in0", WireMessage(0, Kind.DATA, Direction.FWD, Tag(5, ()), np.ones((MAX_ROWS + 1, node.in_features), np.int64))),
    ]
    phase["bad"] = [{"stream": s, "beats": [int(b) for b in encode_beats(m, loose)[0]]} for s, m in bad]
    result = _run(harness, tmp_path, name, [phase], timing=False, expect_error=True)
    want_fwd, want_bwd, want_dumps = _golden(g, name, [phase], result, SaturationCounter())
    for what, want in (("fwd", want_fwd[0]), ("bwd", want_bwd[0])):
        assert {_tag(m): m["payload"] for m in result["phases"][0][what]} == want, what
    assert [(d["key"], d["state"], d["payload"]) for d in result["dumps"]] == want_dumps
    assert want_dumps and want_dumps[0][1] == [21, MUF]


def _measured(result: dict, muf: int, engine: bool = False) -> list[dict[str, float]]:
    """Cycles per message by port, per phase, from the first/last beat events of a timing run."""
    events = result["events"]
    loads = [c for c, s, e in events if s == "params" and e == "first"]
    out = []
    for i, start in enumerate(loads):
        stop = loads[i + 1] if i + 1 < len(loads) else float("inf")
        ev = [(c, s, e) for c, s, e in events if start <= c < stop]

        def first(stream: str, ev: list = ev) -> int:
            return min(c for c, s, e in ev if s == stream and e == "first")

        def last(*streams: str, ev: list = ev) -> int:
            return max(c for c, s, e in ev if s in streams and e == "last")

        n = sum(1 for _, s, e in ev if s == "in0" and e == "first")
        assert n % muf == 0
        # a dump's beats (with the engine, one may stream out after the next phase has begun)
        dumps = [[c for c, s, e in (ev if not engine else events) if s == "grads" and e == edge]
                 for edge in ("first", "last")]
        out.append({
            "dump": sum(b + 1 - a for a, b in zip(*dumps)) / len(dumps[0]),
            "params": first("in0") - start,
            "in0": (last("out0") + 1 - first("in0")) / n,
            "out0_grad": _engine_interval(ev) if engine else (last("in0_grad", "grads") + 1 - first("out0_grad")) / n,
        })
    return out


def _engine_interval(ev: list) -> float:
    """With the dump engine the kernel's end of a backward shows nowhere (its dW loop and the copy
    of G follow the dx, the dump streams out beside): the mean interval between the first dx
    beats of back-to-back backwards, a copy among them."""
    starts = sorted(c for c, s, e in ev if s == "in0_grad" and e == "first")
    return (starts[-1] - starts[0]) / (len(starts) - 1)


def _timed(harness: tuple[Graph, Path], tmp_path: Path, name: str,
           options: DeviceOptions = OPTIONS) -> dict[int, dict[str, float]]:
    """Measured cycles per message by rows and port; each within 15% of the cycle model. A first
    phase, not measured, takes what the kernel does once after reset (its tag table's scrub)."""
    g, _ = harness
    node = g.nodes[name]
    rng = np.random.default_rng(1)
    row_counts = sorted({1, g.input_spec(name, 0).max_rows})
    phases = [_phase(rng, node, v, SLOTS, rows) for v, rows in enumerate([1, *row_counts])]
    result = _run(harness, tmp_path, name, phases, timing=True, muf=options.muf)
    out = {}
    for rows, measured in zip(row_counts, _measured(result, options.muf, options.dump_engine)[1:]):
        ideal = rows * node.in_features * node.out_features / node.parallelism
        for port, cycles in measured.items():
            if port == "dump":
                continue
            model = message_cycles(g, name, options, port, rows)
            print(f"{name} P={node.parallelism} rows={rows} {port}: measured {cycles:.1f}, model {model}, "
                  f"ideal {ideal if port == 'in0' else 2 * ideal if port == 'out0_grad' else '-'}")
            assert abs(model - cycles) <= 0.15 * cycles, f"{name} {port} rows={rows}: model {model}, measured {cycles}"
        out[rows] = measured
    return out


@pytest.mark.parametrize("name", NODES)
def test_linear_cycles(name: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    _timed(harness, tmp_path, name)


def test_the_dump_engine_frees_the_kernel_while_a_dump_streams(engine_harness: tuple[Graph, Path],
                                                               tmp_path: Path) -> None:
    """The zoo mlp's fc0 shape (64 -> 32, 8 MACs): with the engine a backward costs its loops and
    a copy of G (256 words, a word a cycle) per dump, within 15% of the model, while the dump's
    2,000-odd beats stream out beside: of the cycles an inline dump holds the kernel, the engine
    saves at least 3/4."""
    m = _timed(engine_harness, tmp_path, "fe", ENGINE)[1]
    inline = message_cycles(engine_harness[0], "fe", dataclasses.replace(ENGINE, dump_engine=False), "out0_grad", 1)
    assert m["out0_grad"] <= inline - 0.75 * m["dump"] / ENGINE.muf, (m, inline)


def test_a_backward_streams_its_dx_beside_its_dw_loop(harness: tuple[Graph, Path], tmp_path: Path) -> None:
    """fk's and fj's dx is one word of 48 lanes, 12 beats leaving after the dx loop; the dW loop
    starts as the word lands and runs beside them (fk: 16 steps hide them; fj: 2 do not). Their
    GRADS dumps (muf 2) are most of a backward, so the 15% of ``_timed`` would not see the ~12
    cycles a backward that waited for the beats took: here a backward less its share of the
    measured dump must be its modelled cycles without dumps, within 3."""
    g, _ = harness
    no_dump = dataclasses.replace(OPTIONS, muf=LIMITS.max_muf)
    for name in ("fj", "fk"):
        (tmp_path / name).mkdir()
        for rows, m in _timed(harness, tmp_path / name, name).items():
            model = message_cycles(g, name, no_dump, "out0_grad", rows)
            print(f"{name} rows={rows}: backward less dumps {m['out0_grad'] - m['dump'] / MUF:.1f}, model {model}")
            assert abs(m["out0_grad"] - m["dump"] / MUF - model) <= 3, (name, rows, m, model)


def test_mlp_layers_reach_half_the_dsp_peak(harness: tuple[Graph, Path], tmp_path: Path) -> None:
    """The MLP's two layers as kernels side by side: an instance (one forward and one backward
    through each, a GRADS dump every ``muf`` of the model zoo's MLP) takes as long as the slower
    kernel; the MACs it needs over what the instantiated multipliers could do in that time must
    reach 50%. The harness dumps every MUF: the measured dump is shared out over the MLP's muf."""
    g, _ = harness
    muf = next(e for e in ENTRIES if e.name == "mlp").defaults["muf"]
    cycles = {}
    for n in MLP:
        (tmp_path / n).mkdir()
        m = _timed(harness, tmp_path / n, n)[1]
        cycles[n] = m["in0"] + m["out0_grad"] - m["dump"] / MUF + m["dump"] / muf
    macs = sum(3 * g.nodes[n].in_features * g.nodes[n].out_features for n in MLP)
    efficiency = macs / (sum(g.nodes[n].parallelism for n in MLP) * max(cycles.values()))
    print(f"mlp layers: cycles per instance {cycles}, {efficiency:.0%} of the DSP-bound peak")
    assert efficiency >= 0.5


def test_an_aligned_linear_places_beats_by_group() -> None:
    """The packer and unpacker shift a beat by any number of elements only where the beats of a
    row do not land on whole groups of a word (``design.linear_aligned``); the bit-exact tests
    above run both paths: fb, fc, fe (P a multiple of 4) and fa (P=10, one word a row) place
    beats by group, fd (P=3) and ff (P=1) shift."""
    from amp_hls.codegen.rtl import render_kernel
    from amp_hls.design import linear_aligned

    g = _graph()
    design = build_design(g, OPTIONS)
    aligned = set()
    for name in (*NODES, *MLP):
        node = g.nodes[name]
        text = render_kernel(design, name)
        assert ("<< (pk_left * EB)" in text) != linear_aligned(node.in_features, node.parallelism), name
        if linear_aligned(node.in_features, node.parallelism):
            aligned.add(name)
    assert aligned == {"fa", "fb", "fc", "fe", "fg", "fh", "fi", "fj", "fk"}


def test_a_linear_fed_by_a_source_sends_no_dx() -> None:
    """The mlp's fc0 reads a host source (``design.skips_dx``): the numpy device model sends
    nothing back on that channel, the host answers the source itself, and every edge on both
    sides still sees one backward per forward. Each GRADS dump counts the messages it sums.
    (The RTL and C++ kernels are held to the same messages by test_rtl_top and test_csim.)"""
    from amp_hls.host.cpu import CpuDevice
    from amp_hls.host.runner import HostRunner
    from amp_hls.models import MODELS
    from amp_hls.placement import place

    graph = MODELS["mlp"].build()
    placement = place(graph)
    design = build_design(graph, DeviceOptions(numerics=FIXED, muf=2))
    assert [n for n, k in design.nodes.items() if k.skip_dx] == ["fc0"]
    assert design.manifest()["skip_dx"] == ["fc0"]
    device = CpuDevice(placement, FIXED, muf=2)
    runner = HostRunner(placement, device, FIXED)
    rng = np.random.default_rng(0)
    n = 6
    runner.run([{"x": ((), rng.integers(-2**10, 2**10, (1, 64))), "label": ((), np.array([[i % 10]]))}
                for i in range(n)], mak=3)
    x_channel = next(c.channel for c in placement.channels if c.edge is not None and c.edge.dst.node == "fc0")
    assert not [m for m in runner.received if m.channel == x_channel]
    assert runner.host.conservation_report() == [] and device.engine.conservation_report() == []
    assert runner.host.kernels["x"].completed == n
    dumps = [m for m in runner.received if m.kind is Kind.GRADS]
    assert len(dumps) == 2 * n // 2 and all(m.tag.state[1] == 2 for m in dumps)


def test_the_server_scales_a_dump_by_the_messages_it_sums() -> None:
    """Two dumps of one payload, one summing 1 message and one summing 2: the second moves the
    weights by half as much (plain SGD), whatever muf the server was told."""
    from amp_hls.host.server import ParameterServer
    from amp_hls.placement import place
    from amp_hls.runtime.optim import OptimizerConfig

    g = Graph("one")
    g.loss(g.linear(g.tanh(g.source("x", width=2), name="a"), 1, bias=False, name="fc"), g.source("t", width=1), "mse")
    placement = place(g)
    ch = placement.params_channel("fc")
    payload = np.array([[1 << FIXED.grad_acc_frac, 0]], dtype=np.int64)
    steps = []
    for count in (1, 2):
        server = ParameterServer(placement, FIXED, OptimizerConfig("sgd", lr=0.5), {"fc": {"weight": np.zeros((1, 2))}}, muf=7)
        server.apply(WireMessage(ch.channel, Kind.GRADS, Direction.BWD, Tag(0, (0, count)), payload), lambda m: None)
        steps.append(float(server.params()["fc"]["weight"][0, 0]))
    assert steps == [-0.5, -0.25]
    with pytest.raises(Exception, match="count"):
        server.apply(WireMessage(ch.channel, Kind.GRADS, Direction.BWD, Tag(0, (0,)), payload), lambda m: None)


def test_a_kernel_without_dx_is_modelled_without_its_dx_loop() -> None:
    """The cycle model of a Linear that skips dx (design.skips_dx) drops the dx loop's cycles."""
    from amp_hls.cycles.linear import PIPE_OUT, message_cycles

    def port_cycles(node, options, port, rows, skip_dx=False):  # noqa: ANN001, ANN202
        return message_cycles(node, [], [], options, port, rows, skip_dx=skip_dx)

    node = _graph().nodes["fe"]
    full, no_dx = (port_cycles(node, OPTIONS, "out0_grad", 1, skip_dx=s) for s in (False, True))
    words = -(-node.in_features // node.parallelism)
    assert full - no_dx == words * node.out_features + PIPE_OUT  # rows x words x out, and the drain
    assert port_cycles(node, OPTIONS, "in0", 1, skip_dx=True) == port_cycles(node, OPTIONS, "in0", 1)
