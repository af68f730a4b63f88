"""Folding: each Linear's parallelism and the dump period, chosen with the cycle model."""

from __future__ import annotations

import dataclasses

import pytest

from amp_hls.codegen.boards import load_board
from amp_hls.cycles.folding import MAX_PARALLELISM, apply, candidates, fold, format_folding
from amp_hls.cycles.report import cycle_report, sample_inputs
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Linear
from amp_hls.models import MODELS

PYNQ = load_board("pynq-z2")


@pytest.fixture(scope="module")
def mlp():  # type: ignore[no-untyped-def]
    graph = MODELS["mlp"].build()
    return graph, sample_inputs(graph, 6)


def test_candidates_are_the_smallest_parallelism_per_word_count() -> None:
    node = Linear(name="l", in_features=10, out_features=3)
    assert candidates(node) == [1, 2, 3, 4, 5, 10]
    assert max(candidates(Linear(name="w", in_features=300, out_features=1))) <= MAX_PARALLELISM


def test_the_busiest_linear_gets_the_macs_and_the_model_agrees_with_the_report(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, PYNQ, inputs, DeviceOptions())
    assert f.parallelism["fc0"] == 64 and 1 < f.parallelism["head"] < f.parallelism["fc0"]
    assert f.dsps == sum(f.parallelism.values()) <= f.dsp_budget == int(220 * 0.9)
    assert "fc0 (linear) is the bottleneck at its largest useful parallelism 64" in f.bound
    folded = apply(graph, f)
    assert [n.parallelism for n in graph.nodes.values() if isinstance(n, Linear)] == [1, 1]  # untouched
    report = cycle_report(build_design(folded, DeviceOptions(muf=f.muf)), PYNQ, inputs)
    assert {n.name: n.cycles for n in report.nodes} == pytest.approx(f.cycles)
    assert f.instances_per_s == pytest.approx(100e6 / max(max(f.cycles.values()), f.link_beats))
    assert report.macs_instantiated == f.dsps
    text = format_folding(f)
    assert "fc0=64" in text and f"{f.dsps} of {f.dsp_budget} DSP slices" in text


def test_the_dump_period_is_the_shortest_within_five_percent_of_the_best(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, PYNQ, inputs, DeviceOptions())
    shorter = [fold(graph, PYNQ, inputs, DeviceOptions(), muf=m) for m in (1, f.muf // 2)]
    assert all(s.instances_per_s < 0.95 * f.instances_per_s for s in shorter)
    assert fold(graph, PYNQ, inputs, DeviceOptions(), muf=3).muf == 3  # a given period is kept


def test_the_dsp_budget_and_a_target_rate_stop_the_folding(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    small = dataclasses.replace(PYNQ, name="tiny", resources={**PYNQ.resources, "dsp": 20})
    f = fold(graph, small, inputs, DeviceOptions())
    assert f.dsps <= 18 and f.bound.startswith("the DSP budget") and "tiny" in f.bound
    full = fold(graph, PYNQ, inputs, DeviceOptions(), muf=8)
    slow = fold(graph, PYNQ, inputs, DeviceOptions(), muf=8, target_rate=full.instances_per_s / 4)
    assert slow.dsps < full.dsps and "target rate" in slow.bound
    assert 100e6 / max(slow.cycles.values()) >= full.instances_per_s / 4


def test_fixed_parallelism_is_kept_and_checked(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, PYNQ, inputs, DeviceOptions(), fixed={"fc0": 4})
    assert f.parallelism["fc0"] == 4 and "fc0 (linear) is the bottleneck and has its parallelism fixed" in f.bound
    with pytest.raises(AmpHlsError, match="names act0: not a device Linear node .*fc0, head"):
        fold(graph, PYNQ, inputs, DeviceOptions(), fixed={"act0": 2})
    with pytest.raises(AmpHlsError, match="fc0=65: use 1 to 64"):
        fold(graph, PYNQ, inputs, DeviceOptions(), fixed={"fc0": 65})
    tiny = dataclasses.replace(PYNQ, resources={**PYNQ.resources, "dsp": 10})
    with pytest.raises(AmpHlsError, match="need 65 DSP slices .* lower --parallelism"):
        fold(graph, tiny, inputs, DeviceOptions(), fixed={"fc0": 64})


def test_a_non_linear_bottleneck_is_named() -> None:
    graph = MODELS["ggsnn-qm9"].build()
    f = fold(graph, PYNQ, sample_inputs(graph, 3), DeviceOptions())
    assert f.bound.endswith("is the bottleneck and is not a Linear") or "host link" in f.bound
    assert f.dsps <= f.dsp_budget
