"""Validation (amp_hls.ir.validate and the JSON reader): every rule of docs/contracts.md (IR) is enforced.

One test per case. Each asserts an ``IRError`` whose message names the offending node, and the
port where one applies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from amp_hls.errors import IRError
from amp_hls.ir import (
    LIMITS,
    Activation,
    Add,
    Aggregate,
    Broadcast,
    Concat,
    Cond,
    Graph,
    GraphCore,
    Group,
    Isu,
    IsuOp,
    Linear,
    Loss,
    Mul,
    Node,
    Phi,
    Predicate,
    RowSum,
    S,
    Sink,
    Source,
    Split,
    graph_from_json,
    inc,
    loads,
)

Wire = tuple[str, int, str, int]  # src node, out index, dst node, in index


def core(nodes: list[Node], wires: list[Wire]) -> GraphCore:
    """Build with the low-level API (no builder checks) and validate."""
    g = GraphCore("lowlevel")
    for node in nodes:
        g.add_node(node)
    for wire in wires:
        g.connect(*wire)
    return g.validate()


def expect(build: Callable[[], Any], node: str, port: str | None = None, match: str | None = None):
    with pytest.raises(IRError, match=match) as info:
        build()
    err = info.value
    assert err.node == node
    assert f"node '{node}'" in str(err)
    if port is not None:
        assert err.port == port
        assert f"port {port}" in str(err)
    return err


def src(name: str = "x", width: int = 3, **kw: Any) -> Source:
    return Source(name=name, width=width, **kw)


# --- connectivity ------------------------------------------------------------------------------


def test_unconnected_input():
    nodes = [src("x"), Add(name="sum", arity=2), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "sum", 0), ("sum", 0, "out", 0)]),
           "sum", "in1", "not connected")


def test_unconnected_output():
    nodes = [src("x", 4), Split(name="halves", sizes=(2, 2)), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "halves", 0), ("halves", 0, "out", 0)]),
           "halves", "out1", "not connected")


def test_doubly_connected_input():
    nodes = [src("x"), src("y"), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "out", 0), ("y", 0, "out", 0)]),
           "out", "in0", "connected 2 times")


def test_doubly_connected_output():
    nodes = [src("x"), Sink(name="a"), Sink(name="b")]
    err = expect(lambda: core(nodes, [("x", 0, "a", 0), ("x", 0, "b", 0)]),
                 "x", "out0", "connected 2 times")
    assert "broadcast" in str(err)


def test_edge_to_a_nonexistent_node():
    nodes = [src("x"), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "out", 0), ("x", 0, "ghost", 0)]),
           "ghost", match="does not exist")


def test_edge_from_a_nonexistent_node():
    nodes = [src("x"), Sink(name="out")]
    expect(lambda: core(nodes, [("phantom", 0, "out", 0), ("x", 0, "out", 0)]),
           "phantom", match="does not exist")


def test_edge_to_an_input_port_that_does_not_exist():
    nodes = [src("x"), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "out", 1)]), "out", "in1", "no such port")


def test_edge_from_an_output_port_that_does_not_exist():
    nodes = [src("x"), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 1, "out", 0)]), "x", "out1", "no such port")


def test_edge_from_a_node_without_outputs():
    nodes = [src("x"), Sink(name="out"), Sink(name="other")]
    expect(lambda: core(nodes, [("x", 0, "out", 0), ("out", 0, "other", 0)]),
           "out", "out0", "no such port")


# --- shapes ----------------------------------------------------------------------------------------


def test_add_width_mismatch():
    nodes = [src("x", 3), src("y", 4), Add(name="sum", arity=2), Sink(name="out")]
    wires = [("x", 0, "sum", 0), ("y", 0, "sum", 1), ("sum", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "sum", "in1", "width mismatch")


def test_linear_in_features_disagree_with_input():
    nodes = [src("x", 3), Linear(name="fc1", in_features=5, out_features=2), Sink(name="out")]
    wires = [("x", 0, "fc1", 0), ("fc1", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "fc1", "in0", "width mismatch")


def test_split_sizes_disagree_with_input():
    nodes = [src("x", 5), Split(name="parts", sizes=(2, 2)), Sink(name="a"), Sink(name="b")]
    wires = [("x", 0, "parts", 0), ("parts", 0, "a", 0), ("parts", 1, "b", 0)]
    expect(lambda: core(nodes, wires), "parts", "in0", "width mismatch")


def test_phi_loop_input_width_mismatch():
    nodes = [
        src("h0", 4),
        Phi(name="h", arity=2),
        Linear(name="fc", in_features=4, out_features=5),
        Isu(name="step", ops=(inc(0),)),
        Cond(name="more", predicate=S[0] < 3),
        Sink(name="out"),
    ]
    wires = [("h0", 0, "h", 0), ("h", 0, "fc", 0), ("fc", 0, "step", 0), ("step", 0, "more", 0),
             ("more", 0, "h", 1), ("more", 1, "out", 0)]
    expect(lambda: core(nodes, wires), "h", "in1", "width mismatch")


def test_group_of_multi_row_messages():
    nodes = [src("x", 3, max_rows=4), Group(name="grp", max_rows=4), Sink(name="out")]
    wires = [("x", 0, "grp", 0), ("grp", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "grp", "in0", "single-row")


def test_aggregate_edges_of_wrong_width():
    nodes = [src("x", 3, max_rows=4), src("adj", 3, max_rows=8, dtype="index"),
             Aggregate(name="agg"), Sink(name="out")]
    wires = [("x", 0, "agg", 0), ("adj", 0, "agg", 1), ("agg", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "agg", "in1", "width 2")


def test_aggregate_edges_of_data_dtype():
    nodes = [src("x", 3, max_rows=4), src("adj", 2, max_rows=8), Aggregate(name="agg"),
             Sink(name="out")]
    wires = [("x", 0, "agg", 0), ("adj", 0, "agg", 1), ("agg", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "agg", "in1", "index rows")


# --- cycles ----------------------------------------------------------------------------------------


def loop(body: list[Node], exit_node: str) -> tuple[list[Node], list[Wire]]:
    """``x -> h (phi) -> body... -> h.in1``, with ``exit_node``'s out1 going to a sink."""
    nodes = [src("x", 3), Phi(name="h", arity=2), *body, Sink(name="out")]
    wires: list[Wire] = [("x", 0, "h", 0)]
    chain = ["h"] + [n.name for n in body]
    wires += [(a, 0, b, 0) for a, b in zip(chain, chain[1:])]
    wires += [(chain[-1], 0, "h", 1), (exit_node, 1, "out", 0)]
    return nodes, wires


def test_cycle_without_isu():
    nodes, wires = loop([Linear(name="fc", in_features=3, out_features=3),
                         Cond(name="more", predicate=S[0] < 3)], "more")
    err = expect(lambda: core(nodes, wires), "fc", match="no isu node")
    assert "fc, h, more" in str(err)


def test_cycle_without_cond():
    nodes, wires = loop([Isu(name="step", ops=(inc(0),)), Broadcast(name="bc", arity=2)], "bc")
    err = expect(lambda: core(nodes, wires), "bc", match="no cond node")
    assert "bc, h, step" in str(err)


def test_self_loop_without_phi():
    nodes = [src("x"), Add(name="acc", arity=2), Broadcast(name="bc", arity=2), Sink(name="out")]
    wires = [("x", 0, "acc", 0), ("acc", 0, "bc", 0), ("bc", 0, "acc", 1), ("bc", 1, "out", 0)]
    expect(lambda: core(nodes, wires), "acc", match="depends only on itself")


def test_valid_loop_passes():
    nodes, wires = loop([Isu(name="step", ops=(inc(0),)), Cond(name="more", predicate=S[0] < 3)],
                        "more")
    core(nodes, wires)


# --- attributes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "predicate, match",
    [
        (Predicate(0, "lt2", rhs_const=1), "unknown comparison"),
        (Predicate(0, ["lt"], rhs_const=1), "unknown comparison"),  # type: ignore[arg-type]
        (S[4] < 1, "state index 4"),
        (S[0] < S[7], "state index 7"),
        (S[-1] < 1, "state index -1"),
        (Predicate(0, "lt"), "exactly one"),
        (Predicate(0, "lt", rhs_state=1, rhs_const=2), "exactly one"),
        (S[0] < 1 << 16, "outside"),
        (Predicate(None, "lt", rhs_const=1), "state index None"),  # type: ignore[arg-type]
        (Predicate("0", "lt", rhs_const=1), "state index '0'"),  # type: ignore[arg-type]
        (Predicate(0.5, "lt", rhs_const=1), "state index 0.5"),  # type: ignore[arg-type]
        (Predicate(0, "lt", rhs_const=1.5), "constant 1.5"),  # type: ignore[arg-type]
        (Predicate(True, "lt", rhs_const=1), "state index True"),  # type: ignore[arg-type]
    ],
    ids=repr,
)
def test_cond_predicate_invalid(predicate, match):
    expect(lambda: GraphCore("g").add_node(Cond(name="route", predicate=predicate)), "route",
           match=match)


def test_cond_predicate_not_a_predicate():
    expect(lambda: GraphCore("g").add_node(Cond(name="route", predicate="S[0] < 1")), "route",
           match="must be a Predicate")


@pytest.mark.parametrize(
    "op, match",
    [
        (IsuOp("rotate"), "unknown state update"),
        (IsuOp("inc", 4), "state index 4"),
        (IsuOp("inc", "0"), "state index '0'"),  # type: ignore[arg-type]
        (IsuOp("push", 0, 1 << 16), "state value 65536"),
        (IsuOp("push", 0, 1.5), "state value 1.5"),  # type: ignore[arg-type]
        (IsuOp("dec", 0, -1), "state value -1"),
    ],
    ids=repr,
)
def test_isu_op_invalid(op, match):
    expect(lambda: GraphCore("g").add_node(Isu(name="upd", ops=(op,))), "upd", match=match)


def test_isu_without_ops():
    expect(lambda: GraphCore("g").add_node(Isu(name="upd", ops=())), "upd", match="at least one")


def test_phi_arity_one():
    expect(lambda: GraphCore("g").add_node(Phi(name="merge", arity=1)), "merge", match="arity")


def test_phi_arity_one_via_builder():
    g = Graph("g")
    x = g.source("x", width=2)
    expect(lambda: g.phi(x, name="merge"), "merge", match="arity")


@pytest.mark.parametrize("kind", [Broadcast, Add, Mul, Concat, Phi])
def test_arity_above_limit(kind):
    arity = LIMITS.max_arity + 1
    expect(lambda: GraphCore("g").add_node(kind(name="wide", arity=arity)), "wide",
           match=f"got {arity}")


@pytest.mark.parametrize("sizes", [(4,), tuple([1] * (LIMITS.max_arity + 1)), (2, 0), (2, -1)])
def test_split_sizes_invalid(sizes):
    expect(lambda: GraphCore("g").add_node(Split(name="parts", sizes=sizes)), "parts")


def test_unknown_activation_kind():
    expect(lambda: GraphCore("g").add_node(Activation(name="act", fn="gelu")), "act",
           match="unknown activation 'gelu'")


def test_unknown_loss_kind():
    expect(lambda: GraphCore("g").add_node(Loss(name="crit", fn="hinge")), "crit",
           match="unknown loss 'hinge'")


@pytest.mark.parametrize("attr", ["in_features", "out_features", "parallelism"])
@pytest.mark.parametrize("value", [0, -3, 2.0, True, "8"])
def test_linear_attribute_not_a_positive_int(attr, value):
    kw = {"in_features": 4, "out_features": 4, "parallelism": 1, attr: value}
    expect(lambda: GraphCore("g").add_node(Linear(name="fc", **kw)), "fc", match=attr)


def test_linear_bias_not_a_bool():
    expect(lambda: GraphCore("g").add_node(
        Linear(name="fc", in_features=2, out_features=2, bias=1)), "fc", match="bias")


def test_source_dtype_invalid():
    expect(lambda: GraphCore("g").add_node(src("x", dtype="float")), "x", match="dtype")


# --- names ------------------------------------------------------------------------------------------

BAD_NAMES = [
    "fc-1", "1fc", "a b", "x;rm -rf", 'fc1"; exec', "$(whoami)", "", "a" * 49, "fc1\n", "é",
    "int", "module", "proc", "always_ff", "class", "wire", "exec", "Module", "INT",
    "ap_clk", "amp_top", "__x", "AP_rst",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_unsafe_node_name(name):
    err = expect(lambda: GraphCore("g").add_node(src(name)), name)
    assert repr(name) in str(err)


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_unsafe_node_name_via_builder(name):
    g = Graph("g")
    x = g.source("x", width=2)
    expect(lambda: g.relu(x, name=name), name)
    assert list(g.nodes) == ["x"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_unsafe_graph_name(name):
    with pytest.raises(IRError, match="graph name"):
        Graph(name)


def test_unsafe_name_stored_behind_the_api():
    g = GraphCore("g")
    g.add_node(src("x"))
    g.nodes["x"].name = "x;rm"
    g.nodes = {"x;rm": g.nodes["x"]}
    expect(g.validate, "x;rm", match="safe identifier")


def test_node_stored_under_another_name():
    g = GraphCore("g")
    g.add_node(src("x"))
    g.nodes = {"y": g.nodes["x"]}
    expect(g.validate, "x", match="stored under the name 'y'")


def test_name_length_limit_is_inclusive():
    GraphCore("g").add_node(src("a" * 48))


def test_duplicate_name():
    g = GraphCore("g")
    g.add_node(src("fc1"))
    expect(lambda: g.add_node(Sink(name="fc1")), "fc1", match="already exists")


def test_names_equal_ignoring_case():
    g = GraphCore("g")
    g.add_node(src("fc1"))
    expect(lambda: g.add_node(Sink(name="FC1")), "FC1", match="already exists")


def test_names_equal_ignoring_case_behind_the_api():
    g = GraphCore("g")
    g.add_node(src("fc1"))
    g.nodes["FC1"] = Sink(name="FC1")
    g.connect("fc1", 0, "FC1", 0)
    expect(g.validate, "FC1", match="collides with node 'fc1'")


# --- declared maxima ---------------------------------------------------------------------------------


def test_source_width_beyond_maximum():
    expect(lambda: core([src("x", LIMITS.max_width + 1)], []), "x", match="beyond the maximum")


def test_source_max_rows_beyond_maximum():
    expect(lambda: core([src("x", 3, max_rows=LIMITS.max_rows + 1)], []), "x", match="beyond the maximum")


def test_group_max_rows_beyond_maximum():
    expect(lambda: GraphCore("g").add_node(Group(name="grp", max_rows=LIMITS.max_rows + 1)), "grp",
           match="beyond the maximum")


@pytest.mark.parametrize("attr", ["in_features", "out_features"])
def test_linear_features_beyond_maximum(attr):
    kw = {"in_features": 4, "out_features": 4, attr: LIMITS.max_width + 1}
    expect(lambda: GraphCore("g").add_node(Linear(name="fc", **kw)), "fc",
           match="beyond the maximum")


def test_concat_beyond_maximum_width():
    half = LIMITS.max_width // 2 + 1
    nodes = [src("a", half), src("b", half), Concat(name="cat", arity=2), Sink(name="out")]
    wires = [("a", 0, "cat", 0), ("b", 0, "cat", 1), ("cat", 0, "out", 0)]
    expect(lambda: core(nodes, wires), "cat", match="beyond the maximum")


def test_too_many_nodes():
    g = GraphCore("g")
    for i in range(LIMITS.max_nodes // 2):
        g.add_node(src(f"x{i}"))
        g.add_node(Sink(name=f"s{i}"))
        g.connect(f"x{i}", 0, f"s{i}", 0)
    with pytest.raises(IRError, match=f"already has {LIMITS.max_nodes} nodes, the maximum {LIMITS.max_nodes}"):
        g.add_node(src("one_more"))  # refused as it is added: no graph grows past the limit
    g.nodes["one_more"] = src("one_more")  # stored behind the API: validation still counts
    with pytest.raises(IRError, match=f"beyond {LIMITS.max_nodes}"):
        g.validate()


# --- dtypes and losses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "node, port",
    [
        (Linear(name="fc", in_features=1, out_features=2), 0),
        (Activation(name="fc", fn="relu"), 0),
        (RowSum(name="fc"), 0),
        (Add(name="fc", arity=2), 0),
        (Aggregate(name="fc"), 0),
    ],
    ids=lambda v: getattr(v, "kind", str(v)),
)
def test_index_edge_into_compute_node(node, port):
    nodes = [src("label", 1, dtype="index"), src("other", 1), node, Sink(name="out")]
    wires = [("label", 0, "fc", port), ("fc", 0, "out", 0)]
    if node.n_inputs == 2:
        wires.append(("other", 0, "fc", 1 - port))
    else:
        nodes.append(Sink(name="spare"))
        wires.append(("other", 0, "spare", 0))
    expect(lambda: core(nodes, wires), "fc", f"in{port}", "expects data")


def loss_graph(fn: str, target: Source) -> Callable[[], GraphCore]:
    nodes = [src("pred", 3), target, Loss(name="crit", fn=fn)]
    return lambda: core(nodes, [("pred", 0, "crit", 0), (target.name, 0, "crit", 1)])


def test_mse_with_index_target():
    expect(loss_graph("mse", src("t", 3, dtype="index")), "crit", "in1", "data target")


def test_mse_target_width_mismatch():
    expect(loss_graph("mse", src("t", 4)), "crit", "in1", "width mismatch")


def test_softmax_ce_with_data_target():
    expect(loss_graph("softmax_ce", src("t", 1)), "crit", "in1", "index target")


def test_softmax_ce_with_wide_index_target():
    expect(loss_graph("softmax_ce", src("t", 2, dtype="index")), "crit", "in1", "width 1")


def test_valid_losses_pass():
    loss_graph("mse", src("t", 3))()
    loss_graph("softmax_ce", src("t", 1, dtype="index"))()


# --- placement and graph-level rules -------------------------------------------------------------------


@pytest.mark.parametrize(
    "node", [src("x", placement="device"), Sink(name="x", placement="device")],  # a loss may run on either side
    ids=lambda n: n.kind,
)
def test_host_only_kind_on_device(node):
    g = GraphCore("g")
    g.add_node(node)
    expect(g.validate, "x", match="runs on the host")


@pytest.mark.parametrize("placement", ["fpga", "", "HOST", 0])
def test_invalid_placement(placement):
    nodes = [src("x"), Activation(name="act", fn="relu", placement=placement), Sink(name="out")]
    expect(lambda: core(nodes, [("x", 0, "act", 0), ("act", 0, "out", 0)]), "act",
           match="placement")


def test_graph_with_no_source():
    g = GraphCore("nosrc")
    g.add_node(Sink(name="out"))
    with pytest.raises(IRError, match="no source"):
        g.validate()


def test_graph_with_no_nodes():
    with pytest.raises(IRError, match="no nodes"):
        GraphCore("empty").validate()


# --- JSON documents ----------------------------------------------------------------------------------

DELETE = object()


def mlp_doc() -> dict:
    g = Graph("mlp")
    h = g.tanh(g.linear(g.source("x", width=4), 3, name="fc1"), name="act1")
    g.loss(g.linear(h, 2, name="fc2"), g.source("label", width=1, dtype="index"), "softmax_ce",
           name="ce")
    return copy.deepcopy(g.validate().to_json())


def mutate(doc: dict, path: tuple, value: Any) -> dict:
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


def test_mlp_doc_is_valid():
    doc = mlp_doc()
    assert [n["name"] for n in doc["nodes"]] == ["x", "fc1", "act1", "fc2", "label", "ce"]
    graph_from_json(doc)


@pytest.mark.parametrize("text", ["{nope", "", "[1, 2", "\x00", "{" * 100_000])
def test_json_text_that_is_not_json(text):
    with pytest.raises(IRError, match="not valid JSON"):
        loads(text)


@pytest.mark.parametrize("doc", [[], "graph", 3, None])
def test_json_document_not_an_object(doc):
    with pytest.raises(IRError, match="JSON object"):
        graph_from_json(doc)


@pytest.mark.parametrize(
    "path, value, match",
    [
        (("schema",), "onnx", "not an amp-hls graph"),
        (("schema",), DELETE, "not an amp-hls graph"),
        (("version",), 2, "version 2"),
        (("version",), "1", "version '1'"),
        (("version",), DELETE, "version None"),
        (("name",), DELETE, "no 'name'"),
        (("name",), 7, "must be a str"),
        (("name",), "1graph", "graph name"),
        (("nodes",), {"x": {}}, "'nodes' must be a list"),
        (("nodes",), DELETE, "no 'nodes'"),
        (("edges",), "x.out0->fc1.in0", "'edges' must be a list"),
        (("nodes", 0), "x", "node #0 must be a JSON object"),
        (("nodes", 0, "name"), DELETE, "node #0 has no 'name'"),
        (("nodes", 0, "name"), ["x"], "node #0 field 'name' must be a str"),
        (("edges", 0), ["x.out0", "fc1.in0"], "edge #0 must be an object"),
        (("edges", 0, "src"), DELETE, "edge #0 has no 'src'"),
        (("edges", 0, "dst"), 3, "edge #0 field 'dst' must be a str"),
        (("edges", 0, "src"), "x.in0", "not an output port"),
        (("edges", 0, "dst"), "fc1.out0", "not an input port"),
        (("edges", 0, "src"), "x.out", "not an output port"),
        (("edges", 0, "src"), "x", "not an output port"),
        (("edges", 0, "src"), "x.out0.y", "not an output port"),
        (("edges", 0, "src"), "x.out-1", "not an output port"),
        (("edges", 0, "src"), "x.out1234", "not an output port"),
        (("edges", 0, "src"), "1x.out0", "not an output port"),
        (("edges", 0, "src"), " x.out0", "not an output port"),
        (("edges", 0, "dst"), "fc1.in0\n", "not an input port"),
    ],
    ids=lambda v: "DELETE" if v is DELETE else repr(v),
)
def test_json_document_malformed(path, value, match):
    doc = mutate(mlp_doc(), path, value)
    with pytest.raises(IRError, match=match):
        graph_from_json(doc)


@pytest.mark.parametrize(
    "index, path, value, match",
    [
        (1, ("kind",), "conv2d", "unknown node kind 'conv2d'"),
        (1, ("kind",), DELETE, "has no 'kind'"),
        (1, ("kind",), 5, "'kind' must be a str"),
        (1, ("attrs",), [4, 3], "attrs must be a JSON object"),
        (1, ("attrs", "in_features"), DELETE, "bad attributes"),
        (1, ("attrs", "stride"), 2, "bad attributes"),
        (1, ("attrs", "name"), "fc9", "bad attributes"),
        (1, ("attrs", "bias"), "yes", "bias must be true or false"),
        (1, ("attrs", "in_features"), "4", "in_features must be a positive integer"),
        (1, ("attrs", "out_features"), 3.0, "out_features must be a positive integer"),
        (1, ("attrs", "out_features"), None, "out_features must be a positive integer"),
        (1, ("attrs", "in_features"), 5, "width mismatch"),
        (1, ("placement",), "gpu", "placement must be one of"),
        (2, ("attrs", "fn"), "swish", "unknown activation"),
        (2, ("attrs", "fn"), ["tanh"], "unknown activation"),
        (0, ("attrs", "width"), -1, "width must be a positive integer"),
        (0, ("attrs", "dtype"), "bytes", "dtype must be one of"),
        (0, ("placement",), "device", "runs on the host"),
        (5, ("attrs", "fn"), "mse", "mse expects a data target"),
    ],
)
def test_json_node_malformed(index, path, value, match):
    doc = mlp_doc()
    name = doc["nodes"][index]["name"]
    mutate(doc["nodes"][index], path, value)
    expect(lambda: graph_from_json(doc), name, match=match)


def test_json_edge_to_a_nonexistent_node():
    doc = mlp_doc()
    doc["edges"][0]["dst"] = "nowhere.in0"
    expect(lambda: graph_from_json(doc), "nowhere", match="does not exist")


def test_json_edge_to_a_port_that_does_not_exist():
    doc = mlp_doc()
    doc["edges"][0]["dst"] = "fc1.in3"
    expect(lambda: graph_from_json(doc), "fc1", "in3", "no such port")


def test_json_duplicate_node():
    doc = mlp_doc()
    doc["nodes"].append(dict(doc["nodes"][1], name="FC1"))
    expect(lambda: graph_from_json(doc), "FC1", match="already exists")


def test_json_unsafe_node_name():
    doc = mlp_doc()
    doc["nodes"][1]["name"] = "fc1; rm -rf /"
    expect(lambda: graph_from_json(doc), "fc1; rm -rf /", match="safe identifier")


def cond_doc(predicate: Any) -> dict:
    return {
        "schema": "amp-hls.graph", "version": 1, "name": "routed",
        "nodes": [
            {"name": "x", "kind": "source", "attrs": {"width": 2}},
            {"name": "route", "kind": "cond", "attrs": {"predicate": predicate}},
            {"name": "a", "kind": "sink"},
            {"name": "b", "kind": "sink"},
        ],
        "edges": [{"src": "x.out0", "dst": "route.in0"}, {"src": "route.out0", "dst": "a.in0"},
                  {"src": "route.out1", "dst": "b.in0"}],
    }


def test_json_cond_doc_is_valid():
    g = graph_from_json(cond_doc({"index": 0, "op": "lt", "rhs_const": 3}))
    assert g.nodes["route"].predicate == (S[0] < 3)


@pytest.mark.parametrize(
    "predicate, match",
    [
        ({"index": 0, "op": "lt"}, "exactly one"),
        ({"index": 0, "op": "lt", "rhs_const": 3, "extra": 1}, "bad attributes"),
        ({"index": "0", "op": "lt", "rhs_const": 3}, "state index '0'"),
        ({"index": None, "op": "lt", "rhs_const": 3}, "state index None"),
        ({"index": 0, "op": {"lt": 1}, "rhs_const": 3}, "unknown comparison"),
        ({"index": 0, "op": "lt", "rhs_const": [3]}, "constant"),
        ([0, "lt", 3], "must be a Predicate"),
    ],
    ids=repr,
)
def test_json_cond_predicate_malformed(predicate, match):
    expect(lambda: graph_from_json(cond_doc(predicate)), "route", match=match)


@pytest.mark.parametrize(
    "ops, match",
    [
        ({"op": "inc"}, "needs at least one"),
        ([{"op": "inc", "index": "0", "value": 1}], "state index '0'"),
        ([{"op": "inc", "index": 0, "value": 1.5}], "state value 1.5"),
        ([{"op": "inc", "idx": 0}], "bad attributes"),
        ([3], "must be IsuOp"),
        ([], "at least one"),
    ],
    ids=repr,
)
def test_json_isu_ops_malformed(ops, match):
    doc = {
        "schema": "amp-hls.graph", "version": 1, "name": "steps",
        "nodes": [
            {"name": "x", "kind": "source", "attrs": {"width": 2}},
            {"name": "upd", "kind": "isu", "attrs": {"ops": ops}},
            {"name": "out", "kind": "sink"},
        ],
        "edges": [{"src": "x.out0", "dst": "upd.in0"}, {"src": "upd.out0", "dst": "out.in0"}],
    }
    expect(lambda: graph_from_json(doc), "upd", match=match)
