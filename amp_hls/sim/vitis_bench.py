"""The C++ testbench of a generated project for Vitis HLS C simulation and co-simulation.

``write_vitis_testbench(root)`` writes ``root/tb/amp_tb.cpp`` (``templates/testbench/amp_tb.cpp.j2``):
a run of the numpy device model (``host.cpu.CpuDevice``, the golden model every executor is
held to) recorded as phases -- the host_in messages the host sent, then what the device gave
back before the host sent again -- replayed against the project's kernels, with each kernel top
in turn called through its Vitis HLS top function (``hls.tcl`` compiles the bench once per top,
``-DAMP_TB_TOP_<top>``), so ``csim_design`` checks the C++ and ``cosim_design`` the RTL Vitis
makes from it. It sits above the generators and the host devices, as ``project_bench`` does.

The bench needs no Vitis to be checked: ``tests/test_vitis_bench.py`` builds it with g++ for every
top, against the project's own stream shim and against Xilinx's Apache-2.0 ``ap_int`` headers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ..codegen.hls import _signature
from ..codegen.jinja import environment
from ..codegen.project import open_project
from ..host.cpu import CpuDevice
from ..host.device import Device
from ..host.runner import HostRunner
from ..placement import Placement
from ..wire import WireMessage, encode_beats
from .project_bench import instances_for, project_setup

TB_DIR = "tb"
TB_FILE = "amp_tb.cpp"


class _Recorder(Device):
    """The numpy device model, every exchange recorded: (messages in, messages out) per recv."""

    def __init__(self, inner: CpuDevice):
        super().__init__(inner.placement)
        self.inner = inner
        self.phases: list[tuple[list[WireMessage], list[WireMessage]]] = []
        self._sent: list[WireMessage] = []

    def send(self, msgs: Sequence[WireMessage]) -> None:
        self._sent.extend(msgs)
        self.inner.send(msgs)

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        out = self.inner.recv(timeout)
        if self._sent or out:
            self.phases.append((self._sent, out))
            self._sent = []
        return out

    def reset(self) -> None:
        self.inner.reset()


def record(placement: Placement, options, weights, instances) -> list[tuple[list[WireMessage], list[WireMessage]]]:  # type: ignore[no-untyped-def]
    device = _Recorder(CpuDevice(placement, options.numerics, muf=options.muf))
    runner = HostRunner(placement, device, options.numerics, seed=0)
    if weights:
        runner.send_weights(weights, version=1)
    runner.run(instances, mak=1)
    return device.phases


def write_vitis_testbench(root: str | Path, instances: int | None = None, seed: int = 0) -> Path:
    """``root/tb/amp_tb.cpp``: ``instances`` (default: enough for a GRADS dump, at most 8) run
    through the numpy device model at mak 1, as the phases the bench replays."""
    root = Path(root)
    project = open_project(root)
    placement, options, weights = project_setup(root, weights_seed=seed)
    n = instances if instances is not None else min(8, max(2, options.muf))
    phases = record(placement, options, weights, instances_for(placement.graph, n, seed))
    in_beats: list[int] = []
    in_end: list[int] = []
    out_beats: list[int] = []
    expect = []
    for p, (sent, got) in enumerate(phases):
        for m in sent:
            in_beats += [int(b) for b in encode_beats(m, placement.channel_map)[0]]
        in_end.append(len(in_beats))
        per_channel: dict[int, list[int]] = defaultdict(list)
        for m in got:
            per_channel[m.channel] += [int(b) for b in encode_beats(m, placement.channel_map)[0]]
        for channel, beats in sorted(per_channel.items()):
            expect.append(dict(phase=p, channel=channel, begin=len(out_beats), end=len(out_beats) + len(beats)))
            out_beats += beats
    design = project.design
    wires = design.wiring
    text = environment().get_template("testbench/amp_tb.cpp.j2").render(
        graph_name=design.graph.name,
        streams=[link.name for link in wires.streams],
        kernels=[dict(fn=k.top, args=", ".join(k.streams), signature=_signature(k.ports)) for k in design.nodes.values()],
        demux_args=", ".join(wires.demux_ports),
        mux_args=", ".join(wires.mux_ports),
        demux_signature=_signature(wires.demux_ports),
        mux_signature=_signature(wires.mux_ports),
        phases=phases,
        instances=n,
        in_beats=in_beats,
        in_end=in_end,
        out_beats=out_beats,
        expect=expect,
        max_rounds=10_000_000,
    )
    out = root / TB_DIR / TB_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out
