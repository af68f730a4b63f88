"""The model-writing API (amp_hls.ir.builder): wiring, specs, fan-out, eager checks, summary."""

from __future__ import annotations

import pytest

from amp_hls.errors import IRError
from amp_hls.ir import LIMITS, Add, Broadcast, EdgeSpec, Graph, Mul, S, Value, inc


def build_mlp() -> Graph:
    g = Graph("mlp")
    x = g.source("x", width=64)
    h = g.tanh(g.linear(x, 32, name="fc1"), name="act1")
    y = g.linear(h, 10, name="fc2")
    g.loss(y, g.source("label", width=1, dtype="index"), "softmax_ce", name="ce")
    return g


def build_list_rnn() -> Graph:
    g = Graph("list_rnn")
    xt = g.ungroup(g.source("tokens", width=8, max_rows=20), name="tok")
    h0 = g.source("h0", width=16)
    h = g.phi(h0, arity=2, name="h")
    z = g.linear(g.concat(h, xt, name="hx"), 16, name="rnn_cell")
    counted = g.isu(g.tanh(z, name="act"), inc(0), name="step")
    again, done = g.cond(counted, S[0] < S[1], name="more")
    g.feed(h, again)
    y = g.linear(done, 5, name="readout")
    g.loss(y, g.source("label", width=1, dtype="index"), "softmax_ce", name="ce")
    return g


def edge_names(g: Graph) -> set[str]:
    return {str(e) for e in g.edges}


def snapshot(g: Graph) -> tuple[list[str], list[str], dict[str, int]]:
    arities = {n.name: n.arity for n in g.nodes_of(Broadcast)}
    return list(g.nodes), [str(e) for e in g.edges], arities


# --- the two reference models ------------------------------------------------------------------


def test_mlp_specs_and_edges():
    g = build_mlp().validate()
    assert list(g.nodes) == ["x", "fc1", "act1", "fc2", "label", "ce"]
    assert g.spec("x") == EdgeSpec(64)
    assert g.spec("fc1") == EdgeSpec(32)
    assert g.spec("act1") == EdgeSpec(32)
    assert g.spec("fc2") == EdgeSpec(10)
    assert g.spec("label") == EdgeSpec(1, 1, "index")
    assert g.input_spec("ce", 1) == EdgeSpec(1, 1, "index")
    assert edge_names(g) == {
        "x.out0 -> fc1.in0",
        "fc1.out0 -> act1.in0",
        "act1.out0 -> fc2.in0",
        "fc2.out0 -> ce.in0",
        "label.out0 -> ce.in1",
    }
    assert g.nodes["fc1"].in_features == 64
    assert [g.nodes[n].placement for n in ("x", "fc1", "ce")] == ["host", "device", "host"]


def test_list_rnn_specs_and_loop():
    g = build_list_rnn().validate()
    assert g.spec("tokens") == EdgeSpec(8, 20)
    assert g.spec("tok") == EdgeSpec(8, 1)
    assert g.spec("h") == EdgeSpec(16)
    assert g.spec("hx") == EdgeSpec(24)
    assert g.nodes["rnn_cell"].in_features == 24
    assert g.spec("more", 0) == g.spec("more", 1) == EdgeSpec(16)
    assert g.spec("readout") == EdgeSpec(5)
    assert {"h0.out0 -> h.in0", "more.out0 -> h.in1", "more.out1 -> readout.in0"} <= edge_names(g)
    assert g.nodes["step"].ops == (inc(0),)
    assert str(g.nodes["more"].predicate) == "S[0] < S[1]"
    assert not list(g.nodes_of(Broadcast))


def test_parameter_counts():
    mlp = build_mlp()
    assert mlp.nodes["fc1"].param_shapes() == {"weight": (32, 64), "bias": (32,)}
    assert f"{64 * 32 + 32 + 32 * 10 + 10} parameters" in mlp.summary()
    rnn = build_list_rnn()
    assert f"{24 * 16 + 16 + 16 * 5 + 5} parameters" in rnn.summary()
    g = Graph("nobias")
    g.sink(g.linear(g.source("x", width=3), 4, bias=False, name="fc"))
    assert g.nodes["fc"].param_shapes() == {"weight": (4, 3)}
    assert "12 parameters" in g.summary()


@pytest.mark.parametrize("build", [build_mlp, build_list_rnn])
def test_summary_mentions_every_node(build):
    g = build()
    text = g.summary()
    assert text.splitlines()[0].startswith(f"graph {g.name}: {len(g.nodes)} nodes, {len(g.edges)} edges")
    rows = {line.split()[0]: line for line in text.splitlines()[3:]}
    assert set(rows) == set(g.nodes)
    for name, node in g.nodes.items():
        assert node.kind in rows[name]


def test_summary_shows_inputs_specs_and_attributes():
    rows = {line.split()[0]: line for line in build_list_rnn().summary().splitlines()[3:]}
    assert "h.out0, tok.out0" in rows["hx"]
    assert "1x24" in rows["hx"]
    assert "20x8" in rows["tokens"]
    assert "1x1 index" in rows["label"]
    assert "predicate=S[0] < S[1]" in rows["more"]
    assert "ops=inc S[0] by 1" in rows["step"]


# --- fan-out -------------------------------------------------------------------------------------


def test_second_use_inserts_a_broadcast():
    g = Graph("fan")
    x = g.source("x", width=4)
    g.sink(g.relu(x, name="a"), name="sa")
    g.sink(g.tanh(x, name="b"), name="sb")
    (bcast,) = g.nodes_of(Broadcast)
    assert bcast.name == "x_fan0" and bcast.arity == 2
    assert {"x.out0 -> x_fan0.in0", "x_fan0.out0 -> a.in0", "x_fan0.out1 -> b.in0"} <= edge_names(g)
    assert g.edge_from("x", 0).dst.node == "x_fan0"
    g.validate()
    assert g.spec("x_fan0", 0) == g.spec("x_fan0", 1) == EdgeSpec(4)


def test_third_use_grows_the_same_broadcast():
    g = Graph("fan")
    x = g.source("x", width=4)
    for name in ("a", "b", "c"):
        g.sink(g.relu(x, name=name))
    (bcast,) = g.nodes_of(Broadcast)
    assert bcast.arity == 3
    assert {f"x_fan0.out{i} -> {n}.in0" for i, n in enumerate("abc")} <= edge_names(g)
    assert sum(e.src.node == "x" for e in g.edges) == 1
    g.validate()
    assert g.spec("x_fan0", 2) == EdgeSpec(4)


def test_same_value_twice_in_one_node():
    g = Graph("square")
    x = g.source("x", width=3)
    g.sink(x * x)
    (bcast,) = g.nodes_of(Broadcast)
    assert {"x.out0 -> x_fan0.in0", "x_fan0.out0 -> mul0.in0", "x_fan0.out1 -> mul0.in1"} == (
        edge_names(g) - {"mul0.out0 -> sink0.in0"}
    )
    g.validate()


def test_explicit_broadcast_is_not_grown():
    g = Graph("manual_fan")
    x = g.source("x", width=2)
    a, b = g.broadcast(x, name="bc")
    g.sink(a)
    g.sink(b)
    g.sink(a)  # reuse of one of its outputs gets its own auto broadcast
    assert g.nodes["bc"].arity == 2
    assert g.nodes["bc_fan0"].arity == 2
    g.validate()


def test_fan_out_beyond_the_limit_leaves_the_graph_unchanged():
    g = Graph("wide")
    x = g.source("x", width=2)
    for _ in range(LIMITS.max_arity):
        g.sink(x)
    before = snapshot(g)
    with pytest.raises(IRError, match="fans out") as info:
        g.relu(x, name="one_too_many")
    assert info.value.node == "x" and info.value.port == "out0"
    assert snapshot(g) == before
    g.validate()


def test_fan_out_of_a_long_name_stays_a_safe_identifier():
    g = Graph("longname")
    x = g.source("a" * 48, width=2)
    g.sink(x)
    g.sink(x)
    (bcast,) = g.nodes_of(Broadcast)
    assert len(bcast.name) <= 48
    g.validate()


# --- Value operators -------------------------------------------------------------------------------


def test_value_operators_build_add_and_mul():
    g = Graph("ops")
    a = g.source("a", width=5, max_rows=3)
    b = g.source("b", width=5)
    s = a + b
    p = s * b
    assert isinstance(g.nodes[s.node], Add) and isinstance(g.nodes[p.node], Mul)
    assert g.nodes[s.node].arity == 2
    assert s.spec == EdgeSpec(5, 3) and p.width == 5
    assert {f"a.out0 -> {s.node}.in0", f"{s.node}.out0 -> {p.node}.in0"} <= edge_names(g)
    g.sink(p)
    g.validate()
    assert repr(p) == f"<Value {p.node}.out0 3x5>"


def test_nary_add():
    g = Graph("sum3")
    xs = [g.source(f"x{i}", width=2) for i in range(3)]
    g.sink(g.add(*xs, name="total"))
    assert g.nodes["total"].arity == 3
    g.validate()


# --- eager checks ----------------------------------------------------------------------------------


def test_width_mismatch_raises_at_build_time_and_changes_nothing():
    g = Graph("bad")
    a = g.source("a", width=3)
    b = g.source("b", width=4)
    before = snapshot(g)
    with pytest.raises(IRError, match="width mismatch") as info:
        a + b
    assert info.value.port == "in1"
    with pytest.raises(IRError, match="width mismatch"):
        g.mul(a, b, name="m")
    assert snapshot(g) == before


def test_mse_target_width_is_checked_at_build_time():
    g = Graph("bad")
    pred = g.linear(g.source("x", width=3), 2)
    with pytest.raises(IRError, match="width mismatch") as info:
        g.loss(pred, g.source("t", width=3), "mse", name="l2")
    assert info.value.node == "l2" and info.value.port == "in1"
    assert "l2" not in g.nodes


def test_index_value_into_linear_is_rejected_at_build_time():
    g = Graph("bad")
    label = g.source("label", width=1, dtype="index")
    with pytest.raises(IRError, match="expects data") as info:
        g.linear(label, 3, name="fc")
    assert info.value.node == "fc" and info.value.port == "in0"


def test_concat_beyond_the_max_width_is_rejected_at_build_time():
    g = Graph("bad")
    a = g.source("a", width=LIMITS.max_width)
    with pytest.raises(IRError, match="beyond the maximum") as info:
        g.concat(a, g.source("b", width=1), name="cat")
    assert info.value.node == "cat"


def test_phi_with_more_values_than_arity():
    g = Graph("bad")
    x = g.source("x", width=2)
    with pytest.raises(IRError, match="arity") as info:
        g.phi(x, x, arity=1, name="p")
    assert info.value.node == "p"


def test_feed_rejects_a_full_phi_and_a_non_phi():
    g = build_list_rnn()
    extra = g.source("extra", width=16)
    with pytest.raises(IRError, match="already connected") as info:
        g.feed(Value(g, "h"), extra)
    assert info.value.node == "h" and info.value.port == "in1"
    with pytest.raises(IRError, match="phi") as info:
        g.feed(Value(g, "act"), extra)
    assert info.value.node == "act"


def test_feed_checks_the_width():
    g = Graph("bad")
    h = g.phi(g.source("h0", width=4), arity=2, name="h")
    with pytest.raises(IRError, match="width mismatch") as info:
        g.feed(h, g.source("other", width=5))
    assert info.value.node == "h" and info.value.port == "in1"
    assert g.edge_into("h", 1) is None


def test_value_from_another_graph():
    g1, g2 = Graph("one"), Graph("two")
    x = g1.source("x", width=2)
    with pytest.raises(IRError, match="another graph"):
        g2.relu(x, name="r")


def test_duplicate_name_via_builder():
    g = Graph("dup")
    x = g.source("x", width=2)
    g.relu(x, name="fc")
    with pytest.raises(IRError, match="already exists") as info:
        g.tanh(x, name="FC")
    assert info.value.node == "FC"


def test_auto_names_skip_taken_names():
    g = Graph("autonames")
    x = g.source("x", width=2)
    g.relu(x, name="relu0")
    assert g.relu(x).node == "relu1"


def test_predicate_with_a_fractional_constant_is_rejected_not_truncated():
    g = Graph("g")
    x = g.source("x", width=2)
    with pytest.raises(IRError, match="1.5"):
        g.cond(x, S[0] < 1.5)


def test_oversized_source_fails_where_it_is_built():
    with pytest.raises(IRError, match="beyond the maximum"):
        Graph("g").source("x", width=5000)
