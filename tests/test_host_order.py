"""The host runner's send order within a turn: the messages that can set the most of the device
to work go first (``host.runner.device_reach``), so a turn's critical path does not wait on the
host link behind messages that end a kernel or two in. On tree-rnn's backward turn the padding
leaves' gradients (84 of a 16-tree batch's 100 messages, two kernels deep) used to go first and
held the losses' gradients back by ~1,000 cycles on rtlsim. The zoo's tree-rnn now sorts its leaves
on the host (no padding leaf reaches a device), so these tests place its leaf routers on the
device, as a user's graph may."""

from __future__ import annotations

from collections.abc import Sequence

from amp_hls.cycles.report import sample_inputs
from amp_hls.host import CpuDevice
from amp_hls.host.runner import HostRunner, device_reach
from amp_hls.message import Direction
from amp_hls.models import MODELS
from amp_hls.models.tree_rnn import build_tree_rnn
from amp_hls.placement import Placement, place
from amp_hls.wire import WireMessage
from tests.helpers import FIXED


class RecordingDevice(CpuDevice):
    """The numpy device model, keeping what each ``send`` carried in order."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement, FIXED)
        self.sends: list[list[WireMessage]] = []

    def send(self, msgs: Sequence[WireMessage]) -> None:
        self.sends.append(list(msgs))
        super().send(msgs)


def _entry(placement: Placement, m: WireMessage) -> tuple[str, Direction]:
    edge = placement.channel(m.channel).edge
    assert edge is not None
    return (edge.dst.node if m.direction is Direction.FWD else edge.src.node), m.direction


def test_reach_counts_the_device_nodes_a_message_can_get_to() -> None:
    placement = place(build_tree_rnn(routers="device"))
    reach = device_reach(placement)
    every = len(placement.device_nodes)
    assert reach[("head", Direction.BWD)] == every  # a loss's gradient: back through the whole tree
    assert reach[("is_padding", Direction.BWD)] == 2  # a padding leaf's: is_padding, then words
    assert reach[("words", Direction.FWD)] == every and reach[("head", Direction.FWD)] == 1


def test_a_tree_turn_sends_the_losses_gradients_before_the_padding_leaves() -> None:
    spec = MODELS["tree-rnn"]
    placement = place(build_tree_rnn(routers="device"))
    device = RecordingDevice(placement)
    HostRunner(placement, device, FIXED).run(sample_inputs(placement.graph, 8, 0, spec), mak=8)
    reach = device_reach(placement)
    mixed = 0
    for msgs in device.sends:
        reaches = [reach[_entry(placement, m)] for m in msgs]
        assert reaches == sorted(reaches, reverse=True), reaches
        mixed += len(set(reaches)) > 1
    assert mixed  # some turn carried both, or the test shows nothing
