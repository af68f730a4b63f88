"""Bounds on every number that reaches hardware code, and names that cannot collide with the
code generated around the nodes (amp_hls/ir/limits.py, amp_hls/ir/names.py): each refused at
validation, in one line that names the node and the limit."""

from __future__ import annotations

import json
import re

import pytest

from amp_hls.cli import main
from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.errors import AmpHlsError, IRError
from amp_hls.ir import LIMITS, Graph, Linear, dumps, loads
from amp_hls.ir.names import (
    BOUNDARY_GENERATED,
    INSTANCE_PREFIX,
    KERNEL_PREFIX,
    NAMESPACE_PREFIX,
    RESERVED_PREFIXES,
    generated_names,
)
from amp_hls.models import MODELS


def _mlp_doc(**linear_attrs) -> dict:
    g = Graph("tiny")
    x = g.source("x", width=4)
    g.sink(g.linear(x, 3, name="fc"))
    doc = json.loads(dumps(g))
    fc = next(n for n in doc["nodes"] if n["name"] == "fc")
    fc["attrs"].update(linear_attrs)
    return doc


@pytest.mark.parametrize("p", [LIMITS.max_parallelism + 1, 10**9, 10**300])
def test_a_parallelism_beyond_the_limit_is_refused_naming_node_and_limit(p):
    with pytest.raises(IRError, match=rf"node 'fc': parallelism {p} beyond the maximum {LIMITS.max_parallelism}"):
        loads(json.dumps(_mlp_doc(parallelism=p)))
    with pytest.raises(IRError, match="beyond the maximum"):
        Linear(name="fc", in_features=4, out_features=3, parallelism=p).check_attrs()
    # the largest allowed still is one: 4 rows of W of 64 inputs a step (Linear.outputs_per_step)
    Linear(name="fc", in_features=64, out_features=4, parallelism=LIMITS.max_parallelism).check_attrs()
    loads(json.dumps(_mlp_doc(parallelism=4))).validate()


@pytest.mark.parametrize("text", ["1" * 5000, "1e400", "-1"])
def test_absurd_numbers_in_a_document_are_ir_errors(text):
    raw = json.dumps(_mlp_doc()).replace('"parallelism": 1', f'"parallelism": {text}')
    with pytest.raises(IRError):
        loads(raw)


@pytest.mark.parametrize("field, value", [("muf", 0), ("muf", LIMITS.max_muf + 1), ("muf", 2.0),
                                          ("cache_slots", 0), ("cache_slots", LIMITS.max_cache_slots + 1),
                                          ("cache_slots", True)])
def test_device_options_are_bounded(field, value):
    limit = {"muf": LIMITS.max_muf, "cache_slots": LIMITS.max_cache_slots}[field]
    with pytest.raises(AmpHlsError, match=rf"{field} must be an integer in \[1, {limit}\], got {value!r}"):
        DeviceOptions(**{field: value})
    DeviceOptions(**{field: limit})  # the limit itself is allowed


@pytest.mark.parametrize("option, value", [("--muf", str(LIMITS.max_muf + 1)),
                                           ("--cache-slots", str(LIMITS.max_cache_slots + 1)),
                                           ("--cache-slots", "-3")])
def test_generate_refuses_oversized_options_before_writing(tmp_path, capsys, option, value):
    out = tmp_path / "p"
    assert main(["generate", "mlp", "-o", str(out), option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be an integer in [1, " in err, err
    assert not out.exists()


def test_testbench_refuses_a_mak_beyond_the_cache_slots(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["generate", "mlp", "-o", str(out), "--cache-slots", "4"]) == 0
    capsys.readouterr()
    assert main(["testbench", str(out), "--mak", "1", "5"]) == 2
    err = capsys.readouterr().err
    assert "mak 5 is beyond what the project's 4 cache slots hold for these instances" in err, err
    assert "at most 4 in flight" in err and err.count("\n") == 1
    assert not (out / "tb").exists()


def test_testbench_keeps_its_default_runs_within_what_a_loop_models_caches_hold(tmp_path, capsys):
    """A list leaves a message per element at its loop's nodes: list-rnn's first 8 examples leave
    up to 20 at one node, so 40 cache slots hold 2 instances in flight, the default runs are mak
    1 and 2 (mak 3 would overrun a tag cache and stall: it did on tree-rnn's mak-1 fold), and mak
    3 given is refused."""
    out = tmp_path / "p"
    assert main(["generate", "list-rnn", "-o", str(out), "--cache-slots", "40", "--no-fold"]) == 0
    capsys.readouterr()
    assert main(["testbench", str(out), "--mak", "3"]) == 2
    assert "at most 2 in flight" in capsys.readouterr().err
    assert main(["testbench", str(out)]) == 0
    assert "[1, 2]" in (out / "tb" / "test_amp_top.py").read_text()


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demux", "mux", "boundary", "control", "Demux", "demux_step", "mux_reset",
                                  "boundary_reset", "mux_saturations"])
def test_names_that_collide_with_the_boundarys_code_are_refused(name):
    g = Graph("g")
    x = g.source("x", width=4)
    with pytest.raises(IRError, match=rf"node '{name}': name '{name}' would generate '(k|n)_\w+', which the boundary"):
        g.linear(x, 3, name=name)
    doc = _mlp_doc()
    for n in doc["nodes"]:
        if n["name"] == "fc":
            n["name"] = name
    for e in doc["edges"]:
        e["src"], e["dst"] = (s.replace("fc.", f"{name}.") for s in (e["src"], e["dst"]))
    with pytest.raises(IRError, match=rf"node '{name}'"):
        loads(json.dumps(doc))


def test_the_fifo_prefix_of_amp_tops_stream_buffers_is_reserved():
    g = Graph("g")
    with pytest.raises(IRError, match="node 'fifo_fwd_0': node name 'fifo_fwd_0' uses the reserved prefix 'fifo_'"):
        g.linear(g.source("x", width=4), 3, name="fifo_fwd_0")


def test_two_nodes_whose_generated_names_meet_are_refused():
    g = Graph("g")
    x = g.linear(g.source("x", width=4), 4, name="fc")
    with pytest.raises(IRError, match="node 'fc_step': name 'fc_step' would generate 'k_fc_step', as node 'fc' does"):
        g.linear(x, 3, name="fc_step")


@pytest.fixture(scope="module")
def zoo_projects(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    return {name: (MODELS[name].build(), generate_project(MODELS[name].build(), root / name, "pynq-z2").root)
            for name in ("mlp", "list-rnn", "tree-rnn", "ggsnn-babi15")}


GLOBALS = {  # declarations of names visible to the whole program (C++) or design (SV)
    ".cpp": re.compile(r"^[ \t]*namespace[ \t]+(\w+)|^[ \t]*(?:extern\s+\"C\"\s+)?(?:static\s+)?(?:inline\s+)?"
                       r"[\w:<>]+[ \t*&]+([kn]_\w+)\s*\(", re.M),
    ".sv": re.compile(r"^[ \t]*(?:module|package)\s+(\w+)|^[ \t]*\w+\s*(?:#\([^;]*?\)\s*)?\s(u_\w+)\s*\(", re.M),
}
GLOBALS[".h"] = GLOBALS[".cpp"]


def test_every_global_name_of_generated_code_is_in_the_naming_scheme(zoo_projects):
    # the generators' own global names are read from what they write, not typed here. A node's
    # generated names all have the form k_... or n_... (generated_names); every global name of
    # that form must be one of the graph's nodes' or one of the boundary's (refused as node names)
    seen = set()
    for model, (graph, root) in zoo_projects.items():
        mine = set().union(*(generated_names(n) for n in graph.nodes))
        for path in root.rglob("*"):
            pattern = GLOBALS.get(path.suffix)
            if pattern is None:
                continue
            for match in pattern.finditer(path.read_text()):
                name = next(g for g in match.groups() if g)
                seen.add(name)
                if name.lower().startswith("u_fifo_"):  # a stream's FIFO: no node may be called fifo_...
                    assert "fifo_" in RESERVED_PREFIXES
                elif re.match(f"({KERNEL_PREFIX}|{NAMESPACE_PREFIX}|{INSTANCE_PREFIX})", name, re.I):
                    assert name.lower() in mine | BOUNDARY_GENERATED.keys(), (
                        f"{path.relative_to(root)} ({model}) declares {name!r}: a node could generate it too")
    # the scan found the boundary's and the nodes' code, so it reads what it should
    assert {"k_demux", "k_mux", "k_demux_step", "k_boundary_reset", "amp_top", "u_control", "u_demux"} <= seen
    assert {"k_head", "n_head", "u_head"} <= seen and any(n.startswith("u_fifo_") for n in seen)


def test_no_name_inside_the_generated_cpp_has_a_nodes_form(zoo_projects):
    """A kernel's own names (its statics, its locals) live in its node's namespace n_<node>: one of
    the form n_... could be another node's namespace (a Linear's gradient counter was n_grads,
    ambiguous beside a node called 'grads', found by tests/test_fuzz_graphs.py). Every identifier
    of a generated-name form in the C++ must be a name the scheme gives a node or the boundary."""
    word = re.compile(rf"\b(?:{KERNEL_PREFIX}|{NAMESPACE_PREFIX}|{INSTANCE_PREFIX})\w+")  # C++ tells case apart
    for model, (graph, root) in zoo_projects.items():
        mine = set().union(*(generated_names(n) for n in graph.nodes)) | BOUNDARY_GENERATED.keys()
        for path in [*root.rglob("*.cpp"), *root.rglob("*.h")]:
            stray = {w for w in word.findall(path.read_text()) if w.lower() not in mine}
            assert not stray, f"{path.relative_to(root)} ({model}) names {sorted(stray)}: a node could generate them"
