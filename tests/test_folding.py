"""Folding: each Linear's parallelism and the dump period, chosen with the cycle model and priced
with the resource model against the board."""

from __future__ import annotations

import dataclasses
import math

import pytest

from amp_hls.codegen.boards import load_board
from amp_hls.cycles.folding import (
    MARGIN,
    MAX_PARALLELISM,
    FitError,
    apply,
    candidates,
    check_fit,
    fold,
    format_folding,
    pin,
    structural_loads,
)
from amp_hls.cycles.report import count_messages, cycle_report, pace, sample_inputs
from amp_hls.cycles.resources import BOARD_RESOURCES, design_resources
from amp_hls.design import DeviceOptions, build_design, linear_aligned
from amp_hls.errors import AmpHlsError
from amp_hls.host.settings import generation_options
from amp_hls.ir import Graph, Linear
from amp_hls.models import MODELS
from amp_hls.placement import place

PYNQ = load_board("pynq-z2")
ZCU = load_board("zcu104")
OPTIONS = DeviceOptions(cache_slots=16, max_in_flight=16)  # mlp's generate sizing: 16 x 1 message


def _board(base, **resources):  # type: ignore[no-untyped-def]
    return dataclasses.replace(base, name="tiny", resources={**base.resources, **resources})


@pytest.fixture(scope="module")
def mlp():  # type: ignore[no-untyped-def]
    graph = MODELS["mlp"].build()
    return graph, sample_inputs(graph, 6)


def test_candidates_are_the_smallest_aligned_parallelism_per_word_count() -> None:
    # 10 inputs: 1, 2, 3, 4 words of one beat or less as they come; 5 (two words) rounds up to 8,
    # a whole number of beats (design.linear_aligned); 10 is one word a row
    assert candidates(Linear(name="l", in_features=10, out_features=3)) == [1, 2, 3, 4, 8, 10]
    # 64 inputs: no P above a beat that shifts elements; every word count below a beat's P kept
    wide = candidates(Linear(name="w", in_features=64, out_features=1))
    assert wide == [1, 2, 3, 4, 8, 12, 16, 24, 32, 64]
    assert all(linear_aligned(64, p) for p in wide if p > 4)
    assert max(candidates(Linear(name="w", in_features=300, out_features=1))) <= MAX_PARALLELISM
    # past one word a row: 2 or 4 rows of W a step where they divide out_features (10 inputs take
    # 12 lanes a row); every candidate is a parallelism the node accepts
    assert candidates(Linear(name="l", in_features=10, out_features=6)) == [1, 2, 3, 4, 8, 10, 24]
    assert candidates(Linear(name="w", in_features=64, out_features=32))[-3:] == [64, 128, 256]
    for p in candidates(Linear(name="w", in_features=30, out_features=32)):
        Linear(name="w", in_features=30, out_features=32, parallelism=p).check_attrs()


def test_a_static_graph_needs_no_samples(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    assert structural_loads(place(graph)) == count_messages(place(graph), inputs[:1])  # mlp: one row each
    assert fold(graph, ZCU, None, OPTIONS) == fold(graph, ZCU, inputs, OPTIONS)
    with pytest.raises(AmpHlsError, match="loop or an Ungroup: folding needs sample instances"):
        fold(MODELS["list-rnn"].build(), ZCU, None, OPTIONS)


def test_the_busiest_linear_gets_the_macs_and_the_model_agrees_with_the_report(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, ZCU, inputs, OPTIONS)
    # 4 rows of 64 lanes: fc0's 32 outputs 4 a step (Linear.outputs_per_step)
    assert f.parallelism["fc0"] == 256 and 1 < f.parallelism["head"] < f.parallelism["fc0"]
    assert "fc0 (linear) is the bottleneck at its largest useful parallelism 256" in f.bound
    folded = apply(graph, f)
    assert [n.parallelism for n in graph.nodes.values() if isinstance(n, Linear)] == [1, 1]  # untouched
    design = build_design(folded, dataclasses.replace(OPTIONS, muf=f.muf).on_board(ZCU))  # as generate builds it
    report = cycle_report(design, ZCU, inputs)
    assert {n.name: n.cycles for n in report.nodes} == pytest.approx(f.cycles)
    # the pace prices latency: the report's, at the folding's mak, never faster than the busiest kernel
    again = pace(design, count_messages(design.placement, inputs), len(inputs), f.pace.mak)
    assert f.pace.cycles_per_instance == pytest.approx(again.cycles_per_instance) and f.pace.mak == 16
    assert f.instances_per_s == pytest.approx(100e6 / max(again.cycles_per_instance, max(f.cycles.values()),
                                                          f.link_beats))
    assert f.instances_per_s <= 100e6 / max(f.cycles.values())
    assert report.macs_instantiated == f.dsps == sum(f.parallelism.values())
    assert design_resources(design).total == f.resources.total  # the manifest's numbers are the design's
    text = format_folding(f)
    assert "fc0=256" in text and "resources (model, 90% of each usable): LUT" in text


def test_every_resource_stays_within_the_margin_and_the_full_one_is_named(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, PYNQ, inputs, OPTIONS)
    for r in BOARD_RESOURCES:
        assert getattr(f.resources.total, r) <= MARGIN * PYNQ.resources[r]
    unbounded = fold(graph, ZCU, inputs, OPTIONS)
    luts = f.resources.total.lut
    tight = _board(ZCU, lut=int((luts + 0.3 * (unbounded.resources.total.lut - luts)) / MARGIN))
    g = fold(graph, tight, inputs, OPTIONS)
    assert g.bound.startswith("the LUT budget") and "tiny" in g.bound
    assert g.resources.total.lut <= MARGIN * tight.resources["lut"] and g.dsps < unbounded.dsps


def test_the_dump_period_is_the_shortest_within_five_percent_of_the_best(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, ZCU, inputs, OPTIONS)
    shorter = [fold(graph, ZCU, inputs, OPTIONS, muf=m) for m in (1, f.muf // 2)]
    assert all(s.instances_per_s < 0.95 * f.instances_per_s for s in shorter)
    assert fold(graph, ZCU, inputs, OPTIONS, muf=3).muf == 3  # a given period is kept


def test_the_dsp_budget_and_a_target_rate_stop_the_folding(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    base = design_resources(build_design(graph, OPTIONS)).total.dsp  # every kernel at parallelism 1
    small = _board(ZCU, dsp=int((base + 10) / MARGIN))
    f = fold(graph, small, inputs, OPTIONS)
    assert f.bound.startswith("the DSP budget") and f.resources.total.dsp <= MARGIN * small.resources["dsp"]
    full = fold(graph, ZCU, inputs, OPTIONS, muf=8)
    slow = fold(graph, ZCU, inputs, OPTIONS, muf=8, target_rate=full.instances_per_s / 4)
    assert slow.dsps < full.dsps and "target rate" in slow.bound
    assert 100e6 / max(slow.cycles.values()) >= full.instances_per_s / 4


def test_fixed_parallelism_is_kept_and_checked(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, inputs = mlp
    f = fold(graph, ZCU, inputs, OPTIONS, fixed={"fc0": 4})
    assert f.parallelism["fc0"] == 4 and "fc0 (linear) is the bottleneck and has its parallelism fixed" in f.bound
    with pytest.raises(AmpHlsError, match="names act0: not a device Linear node .*fc0, head"):
        fold(graph, ZCU, inputs, OPTIONS, fixed={"act0": 2})
    with pytest.raises(AmpHlsError, match="fc0=257: use 1 to 256"):
        fold(graph, ZCU, inputs, OPTIONS, fixed={"fc0": 257})
    # above the input width only whole rows of W a step (Linear.outputs_per_step): 128 or 256
    with pytest.raises(AmpHlsError, match=r"fc0=65: node 'fc0': parallelism 65 is above the input width .*\(128, 256\)"):
        fold(graph, ZCU, inputs, OPTIONS, fixed={"fc0": 65})
    with pytest.raises(AmpHlsError, match="fc0=192: "):
        pin(graph, {"fc0": 192})
    tiny = _board(ZCU, dsp=40)
    with pytest.raises(FitError, match=r"does not fit tiny: DSP .* most in fc0 .*lower --parallelism \(fc0=64\)"):
        fold(graph, tiny, inputs, OPTIONS, fixed={"fc0": 64})
    with pytest.raises(FitError, match="lower --parallelism"):  # pinned by hand, not folded: the same check
        check_fit(pin(graph, {"fc0": 64}), tiny, OPTIONS)


def test_too_many_cache_slots_are_refused_with_the_mak_that_fits(mlp) -> None:  # type: ignore[no-untyped-def]
    graph, _ = mlp
    options = DeviceOptions(cache_slots=4000, max_in_flight=4000)
    with pytest.raises(FitError) as err:
        check_fit(graph, PYNQ, options)
    text = str(err.value)
    assert "does not fit pynq-z2" in text and "lower --mak or --cache-slots" in text
    fit = int(text.split("at most ")[1].split(" fit")[0])
    assert 0 < fit < 4000
    check_fit(graph, PYNQ, DeviceOptions(cache_slots=fit, max_in_flight=fit))  # what it names does fit
    with pytest.raises(FitError):
        check_fit(graph, PYNQ, DeviceOptions(cache_slots=fit + 1, max_in_flight=fit + 1))


def test_a_bottleneck_by_its_dumps_is_told_apart_from_the_busiest_without_them() -> None:
    """Folding raises the Linear whose cycles less its GRADS dumps are the most (more MACs do not
    shorten a dump). The joined parts of ``test_a_non_linear_bottleneck_is_named`` feeding a 24 -> 4
    Linear that dumps every gradient (104 beats): the Linear stays the busiest kernel, while the
    concat is the busiest without the dumps, so the bound names the concat as that, not as "the
    bottleneck", and the bottleneck's split shows the dumps."""
    g = Graph("dump_bound")
    joined = g.concat(*(g.source(f"x{i}", width=3) for i in range(8)), name="cat")
    g.loss(g.linear(g.tanh(joined, name="act"), 4, name="l"), g.source("t", width=4), "mse")
    f = fold(g.validate(), ZCU, None, DeviceOptions(cache_slots=2), muf=1)
    assert f.bottleneck == "l" and f.bound == "cat (concat) is the busiest kernel, GRADS dumps aside, and is not a Linear"
    assert f.bottleneck_parts["dump"] == 2 + 4 * 25 + 2 and sum(f.bottleneck_parts.values()) == f.cycles["l"]
    assert "bottleneck l (168 cycles/instance: MAC steps 21%, payload read 4%, GRADS dumps 62%" in format_folding(f)


def test_a_design_too_big_at_one_instance_is_told_no_smaller_tag_table() -> None:
    """ggsnn-qm9 on kv260 at mak 1: the tag tables already hold one instance's 3 messages, so
    fewer slots are no way out (they would hold no instance); the refusal says what is."""
    graph = MODELS["ggsnn-qm9"].build()
    with pytest.raises(FitError) as err:
        fold(graph, load_board("kv260"), sample_inputs(graph, 3), DeviceOptions(cache_slots=3, max_in_flight=1))
    text = str(err.value)
    assert "does not fit kv260" in text and "BRAM36" in text
    assert "--cache-slots" not in text and "a larger board, or a smaller model" in text


def test_a_non_linear_bottleneck_is_named() -> None:
    """Eight 3-wide parts joined (each starts inside a beat: the row-buffer path) outweigh the
    Linear they feed once it has its 24 MACs: folding stops there and says so."""
    g = Graph("joins_bound")
    joined = g.concat(*(g.source(f"x{i}", width=3) for i in range(8)), name="cat")
    g.loss(g.linear(g.tanh(joined, name="act"), 1, name="l"), g.source("t", width=1), "mse")
    f = fold(g.validate(), ZCU, None, DeviceOptions(cache_slots=2))
    assert "cat (concat) is the bottleneck and is not a Linear" in f.bound, f.bound
    for r in BOARD_RESOURCES:
        assert getattr(f.resources.total, r) <= MARGIN * ZCU.resources[r]


def test_latency_is_priced_and_the_in_flight_bound_named(mlp) -> None:  # type: ignore[no-untyped-def]
    """With one instance in flight every instance pays its whole round trip (Little's law): the
    pace says so and names --mak; more in flight approach the busiest kernels' pace."""
    graph, inputs = mlp
    one = fold(graph, ZCU, inputs, DeviceOptions(cache_slots=16, max_in_flight=1), muf=8)
    many = fold(graph, ZCU, inputs, OPTIONS, muf=8)
    assert one.parallelism == many.parallelism  # the same tag tables: the same resources, the same choice
    assert one.pace.mak == 1 and "bound by in-flight instances (mak 1)" in one.bound and "raise --mak" in one.bound
    assert one.cycles_per_instance >= one.pace.round_trip > max(one.cycles.values())
    assert one.instances_per_s < many.instances_per_s
    paces = [dataclasses.replace(many.pace, mak=m).cycles_per_instance for m in (1, 2, 4, 16, 64, 4096)]
    assert paces == sorted(paces, reverse=True)
    # many in flight: each batch as long as its busiest server, kernel or link direction
    assert paces[-1] == pytest.approx(sum(max(p.busiest, p.link_in, p.link_out) for p in many.pace.phases), rel=0.01)
    assert "round trip" in format_folding(one) and "at mak 1" in format_folding(one)


def test_dumps_are_priced_on_the_link_and_the_folds_rank_as_measured(mlp) -> None:  # type: ignore[no-untyped-def]
    """mlp on pynq-z2 at mak 16 (rtlsim: fc0=64, head=11, muf 64 175.9 cycles/instance; head=16,
    muf 32 194.6; head=16, muf 64 157.1): the inline dumps stream out after the batch that
    triggers them, so a shorter period costs its dumps' beats in full and more MACs on head pay
    once fc0's dump is no longer counted as work more MACs could shorten."""
    graph, inputs = mlp
    wide = fold(graph, PYNQ, inputs, OPTIONS, fixed={"fc0": 64, "head": 11}, muf=64)
    often = fold(graph, PYNQ, inputs, OPTIONS, fixed={"fc0": 64, "head": 16}, muf=32)
    free = fold(graph, PYNQ, inputs, OPTIONS)
    assert free.parallelism == {"fc0": 64, "head": 16} and free.muf == 64
    assert free.instances_per_s > wide.instances_per_s > often.instances_per_s
    for f in (wide, often):  # the batch of gradients: its pipeline, then its share of the dumps
        fwd, bwd = f.pace.phases
        assert bwd.dump_after == f.muf and bwd.dumps == f.link_beats - 5  # host_out: the prediction and the dumps
        assert bwd.first_dump(16) == pytest.approx(bwd.undumped_latency + 15 * bwd.undumped)
        assert bwd.batch_cycles(16) == pytest.approx(bwd.first_dump(16) + 16 * bwd.dumps)
        assert f.pace.cycles_per_instance == pytest.approx((fwd.batch_cycles(16) + bwd.batch_cycles(16)) / 16)
    # a dump period shorter than the batch: the link streams the dumps once the first is in
    fwd, bwd = fold(graph, PYNQ, inputs, OPTIONS, fixed={"fc0": 64, "head": 11}, muf=4).pace.phases
    assert bwd.batch_cycles(16) == pytest.approx(bwd.undumped_latency + 3 * bwd.undumped + 16 * bwd.dumps)


def test_a_step_whose_memories_do_not_fit_is_passed_for_a_larger_one() -> None:
    """At 128 slots fc0's x cache is 16 x 8,192 (block RAM) at P=1, 32 x 4,096 and 64 x 2,048 (URAM,
    by its rule) at P=2 and 4, 128 x 1,024 (block RAM) at P=8: with no URAM block to spare the
    folding goes from 1 to 8, not stopping at 1, and on to 4 rows of W a step."""
    graph = MODELS["mlp"].build()
    options = DeviceOptions(cache_slots=128, max_in_flight=128).on_board(ZCU)
    uram = {p: design_resources(build_design(pin(graph, {"fc0": p}), options)).total.uram for p in (1, 2, 4, 8)}
    assert uram[2] == uram[4] == uram[1] + 1 and uram[8] == uram[1]
    tight = dataclasses.replace(ZCU, name="tight", resources={**ZCU.resources, "uram": math.ceil((uram[1] + 0.5) / 0.9)})
    with pytest.raises(FitError, match="URAM"):
        check_fit(pin(graph, {"fc0": 2}), tight, options)
    f = fold(graph, tight, None, options)
    assert f.parallelism["fc0"] == 256 and "largest useful parallelism 256" in f.bound


def test_a_linear_off_the_busiest_is_raised_where_it_shortens_the_round_trip() -> None:
    """list-rnn at mak 5 on pynq-z2: rnn is the busiest at the largest parallelism that fits (42, its
    input width; two outputs a step, 88, would take more LUTs than are left); head is not, but it is on every instance's path, and at five in flight the round trip bounds the pace,
    so one more MAC for head (of 43) speeds it by more than its share."""
    spec = MODELS["list-rnn"]
    graph = spec.build()
    inputs = sample_inputs(graph, 16, 0, spec)
    options = generation_options(spec, graph, DeviceOptions(), muf_given=False, cache_given=False, mak=5)
    f = fold(graph, PYNQ, inputs, options, lanes=False)  # the Linears' steps alone (lanes: test_lanes.py)
    assert f.parallelism == {"head": 2, "rnn": 42}
    assert "rnn at parallelism 88 would need" in f.bound and f.bound.endswith(
        "; then, for the latency-priced pace, head 1 -> 2")
    kept = fold(graph, PYNQ, inputs, options, fixed={"head": 1}, muf=f.muf, lanes=False)
    assert f.instances_per_s >= (1 + 1 / 43) * kept.instances_per_s
    capped = fold(graph, PYNQ, inputs, options, target_rate=kept.instances_per_s * 0.99, lanes=False)
    assert capped.parallelism["head"] == 1  # a target rate met stops it as it stops the busiest's steps
