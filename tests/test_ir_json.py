"""Graphs as JSON (amp_hls.ir.serialize): exact round trips, and untrusted documents fail cleanly."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_hls.errors import IRError
from amp_hls.ir import (
    ACTIVATIONS,
    NODE_KINDS,
    Graph,
    IsuOp,
    Predicate,
    S,
    Value,
    dec,
    dumps,
    graph_from_json,
    inc,
    load,
    loads,
    parent,
    pop,
    push,
    save,
)

ROUND = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build_mlp() -> Graph:
    g = Graph("mlp")
    h = g.relu(g.linear(g.source("x", width=8), 6, name="fc1"), name="act1")
    g.loss(g.linear(h, 3, name="fc2"), g.source("label", width=1, dtype="index"), "softmax_ce")
    return g


def build_list_rnn() -> Graph:
    g = Graph("list_rnn")
    xt = g.ungroup(g.source("tokens", width=4, max_rows=20), name="tok")
    h = g.phi(g.source("h0", width=6), arity=2, name="h")
    z = g.linear(g.concat(h, xt), 6, name="rnn_cell")
    again, done = g.cond(g.isu(g.tanh(z), inc(0)), S[0] < S[1], name="more")
    g.feed(h, again)
    g.loss(g.linear(done, 5, name="readout"), g.source("label", width=1, dtype="index"),
           "softmax_ce")
    return g


def build_every_kind() -> Graph:
    g = Graph("zoo")
    # graph message passing: node states and an index edge list of width 2
    x = g.source("x", width=6, max_rows=10)
    agg = g.aggregate(x, g.source("adj", width=2, max_rows=40, dtype="index"), name="agg")
    a, b = g.split(agg, [2, 4], name="parts")
    gated = g.mul(a, g.linear(b, 2, name="proj", parallelism=2), name="gate")
    pooled = g.rowsum(g.sigmoid(gated, name="sig"), name="pool")
    # a list, ungrouped and grouped back, with a tag pushed and popped on the way
    tok = g.ungroup(g.source("tokens", width=2, max_rows=5), name="tok")
    marked = g.isu(g.relu(tok, name="rel"), push(3), name="marked")
    regroup = g.group(g.isu(marked, pop(3), name="unmarked"), max_rows=5, name="regroup")
    both = g.add(pooled, g.rowsum(regroup, name="listsum"), name="both")
    # a walk up a tree: heap position to parent until the root
    h = g.phi(both, arity=2, name="h")
    up = g.isu(g.tanh(h, name="th"), parent(0), dec(1, 2), name="up")
    again, done = g.cond(up, S[0] > 0, name="notroot")
    g.feed(h, again)
    c1, c2, c3, c4 = g.broadcast(done, 4, name="bc")
    logits = g.linear(g.concat(c1, c2, name="cat"), 3, bias=False, name="logits")
    g.loss(logits, g.source("label", width=1, dtype="index"), "softmax_ce", name="ce")
    g.loss(c3, g.source("target", width=2), "mse", name="l2")
    g.sink(c4, name="out")
    return g


MODELS = [build_mlp, build_list_rnn, build_every_kind]


def round_trip(g: Graph) -> Graph:
    text = dumps(g)
    back = loads(text)
    assert dumps(back) == text
    assert back.summary() == g.summary()
    return back


def test_every_kind_graph_uses_every_kind():
    g = build_every_kind().validate()
    assert {n.kind for n in g.nodes.values()} == set(NODE_KINDS)
    assert g.spec("agg") == g.spec("x")
    assert g.spec("gate").width == 2


@pytest.mark.parametrize("build", MODELS, ids=lambda b: b.__name__)
def test_round_trip(build):
    g = build()
    back = round_trip(g)
    assert list(back.nodes) == list(g.nodes)
    assert [str(e) for e in back.edges] == [str(e) for e in g.edges]
    for name, node in g.nodes.items():
        other = back.nodes[name]
        assert type(other) is type(node)
        assert other.placement == node.placement
        assert other.attrs() == node.attrs()


def test_round_trip_restores_attribute_types():
    back = round_trip(build_every_kind())
    assert back.nodes["parts"].sizes == (2, 4)
    assert back.nodes["up"].ops == (IsuOp("parent", 0, 0), IsuOp("dec", 1, 2))
    assert back.nodes["marked"].ops == (push(3),)
    assert back.nodes["notroot"].predicate == Predicate(0, "gt", rhs_const=0)
    assert back.nodes["logits"].bias is False
    assert back.nodes["proj"].parallelism == 2


def test_document_layout():
    doc = json.loads(dumps(build_mlp()))
    assert (doc["schema"], doc["version"], doc["name"]) == ("amp-hls.graph", 1, "mlp")
    assert doc["nodes"][1] == {
        "name": "fc1", "kind": "linear", "placement": "device",
        "attrs": {"in_features": 8, "out_features": 6, "bias": True, "parallelism": 1},
    }
    assert {"src": "x.out0", "dst": "fc1.in0"} in doc["edges"]


def test_save_and_load(tmp_path):
    g = build_every_kind()
    path = tmp_path / "zoo.json"
    save(g, path)
    assert dumps(load(path)) == dumps(g)


def test_placement_survives():
    g = Graph("placed")
    g.sink(g.linear(g.source("x", width=2), 2, name="fc", placement="host"))
    assert round_trip(g).nodes["fc"].placement == "host"


# --- random chains of valid nodes ------------------------------------------------------------------

STEPS = st.one_of(
    st.tuples(st.just("linear"), st.integers(1, 12), st.booleans(),
              st.sampled_from(["host", "device"])),
    st.tuples(st.just("activation"), st.sampled_from(ACTIVATIONS)),
    st.tuples(st.just("rowsum")),
    st.tuples(st.just("split_concat"), st.integers(1, 11)),
    st.tuples(st.just("square")),
    st.tuples(st.just("sum3")),
    st.tuples(st.just("isu"), st.sampled_from([inc(0), dec(1, 3), push(7), pop(2), parent(3)])),
    st.tuples(st.just("ungroup_group"), st.integers(1, 30)),
    st.tuples(st.just("loop"), st.integers(0, 9)),
)


def chain(width: int, rows: int, steps: list[tuple], end: str) -> Graph:
    g = Graph("chain")
    v = g.source("x", width=width, max_rows=rows)
    for step in steps:
        kind = step[0]
        if kind == "linear":
            v = g.linear(v, step[1], bias=step[2], placement=step[3])
        elif kind == "activation":
            v = g.activation(v, step[1])
        elif kind == "rowsum":
            v = g.rowsum(v)
        elif kind == "split_concat" and v.width > step[1]:
            v = g.concat(*g.split(v, [step[1], v.width - step[1]]))
        elif kind == "square":
            v = v * v
        elif kind == "sum3":
            v = g.add(v, v, v)
        elif kind == "isu":
            v = g.isu(v, step[1])
        elif kind == "ungroup_group":
            v = g.group(g.ungroup(v), max_rows=step[1])
        elif kind == "loop" and v.spec.max_rows == 1:
            v = closed_loop(g, v, step[1])
    if end == "sink":
        g.sink(v)
    elif end == "mse":
        g.loss(v, g.source("target", width=v.width, max_rows=v.spec.max_rows), "mse")
    else:
        g.loss(v, g.source("label", width=1, dtype="index"), "softmax_ce")
    return g


def closed_loop(g: Graph, v: Value, limit: int) -> Value:
    h = g.phi(v, arity=2)
    again, done = g.cond(g.isu(g.tanh(h), inc(0)), S[0] < limit)
    g.feed(h, again)
    return done


@ROUND
@given(
    width=st.integers(1, 12),
    rows=st.integers(1, 40),
    steps=st.lists(STEPS, max_size=8),
    end=st.sampled_from(["sink", "mse", "softmax_ce"]),
)
def test_random_chains_round_trip(width, rows, steps, end):
    g = chain(width, rows, steps, end).validate()
    round_trip(g)


# --- fuzzing untrusted documents -----------------------------------------------------------------------

BASE_DOCS = [build().validate().to_json() for build in MODELS]
FIELD_NAMES = sorted({k for doc in BASE_DOCS for n in doc["nodes"] for k in n["attrs"]}
                     | {"name", "kind", "placement", "attrs", "src", "dst", "op", "index", "value"})
INTERESTING = [
    "in0", "out1", "x.out0", "h.in1", "fc1.out0", "linear", "phi", "cond", "isu", "index",
    "data", "host", "device", "lt", "inc", "push", "parent", "child", "tanh", "mse", "int",
    0, 1, 2, 3, 4, 16, 17, 4096, 4097, 65535, 65536, -1, True, False, None, 1.5, [], {},
]
SCALARS = (
    st.none() | st.booleans() | st.integers(-5, 70_000) | st.integers() | st.floats()
    | st.text(max_size=8) | st.sampled_from(INTERESTING)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every location in a JSON value, the root included."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, prefix + (i,))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    doc: Any = copy.deepcopy(draw(st.sampled_from(BASE_DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(doc)))
        if not path:
            doc = draw(JSON_VALUES)
            continue
        holder = doc
        for key in path[:-1]:
            holder = holder[key]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "delete":
            del holder[path[-1]]
        elif action == "duplicate" and isinstance(holder, list):
            holder.append(copy.deepcopy(holder[path[-1]]))
        else:
            holder[path[-1]] = draw(JSON_VALUES)
    return doc


@FUZZ
@given(doc=mutated_docs())
def test_mutated_documents_are_valid_or_ir_errors(doc):
    try:
        g = graph_from_json(doc)
    except IRError:
        return
    round_trip(g)


@FUZZ
@given(data=st.data())
def test_mutated_text_is_valid_or_ir_error(data):
    text = dumps(data.draw(st.sampled_from(MODELS))())
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 8)))
    text = text[:start] + data.draw(st.text(max_size=8)) + text[end:]
    try:
        g = loads(text)
    except IRError:
        return
    round_trip(g)
