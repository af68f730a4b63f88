"""The HLS kernels carry what Vitis HLS needs to run at the design's rate (issue #14): a Linear
of parallelism P does P MACs a cycle, a row kernel takes a DATA beat a cycle.

Read off the generated C++ of the whole zoo, each Linear given a parallelism of its own: every
innermost loop that walks a payload row (its variable is the last subscript of a payload array)
must be pipelined at II=1 and unrolled by the kernel's lanes (the node's parallelism for a Linear,
the elements of a DATA beat for the others), and every array it indexes with that variable must be
banked cyclic by the same lanes on that dimension, by a pragma in scope (after the array's
declaration, before the loop). g++ ignores the pragmas: test_csim holds the C-sim to the numpy
model with them in place. Pure Python, no compiler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import cycle

import pytest

from amp_hls.codegen.hls import HlsProject, generate_hls
from amp_hls.config import config_from_dict
from amp_hls.design import DeviceOptions, build_design
from amp_hls.ir import GraphCore, Linear, Node
from amp_hls.models import MODELS
from amp_hls.wire import Kind, elements_per_beat

PARALLELISMS = (2, 3, 8, 5)  # none equal to a beat's lanes (4), so a factor copied from the row kernels fails
LOOP = re.compile(r"for \((?:int|uint32_t) (\w+) = [^;]+;[^;]+;[^)]+\)")
DECL = re.compile(r"\b(?:int16_t|int64_t) (\w+)\[")  # payload arrays (16-bit values, 48-bit sums)
PARTITION = re.compile(r"#pragma HLS ARRAY_PARTITION variable=(\w+) type=cyclic factor=(\d+) dim=(\d+)")


@dataclass(frozen=True)
class Loop:
    var: str
    start: int  # where the loop's text begins
    body: str  # its body, braces included when it has them

    @property
    def pragmas(self) -> list[str]:
        """The pragma lines the body opens with."""
        lines = self.body.lstrip("{").strip().splitlines()
        out = []
        for line in lines:
            if not line.strip().startswith("#pragma"):
                break
            out.append(line.strip())
        return out


def _synthesized(text: str) -> str:
    """The source without its C-simulation-only parts (#ifndef __SYNTHESIS__ ... #endif)."""
    return re.sub(r"#ifndef __SYNTHESIS__.*?#endif", "", text, flags=re.S)


def _balanced(text: str, i: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at ``text[i]``."""
    depth = 0
    for j in range(i, len(text)):
        depth += {open_: 1, close: -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    raise AssertionError(f"unbalanced {open_} at {i}")


def _loops(text: str) -> list[Loop]:
    out = []
    for m in LOOP.finditer(text):
        j = m.end()
        while text[j].isspace():
            j += 1
        if text[j] == "{":
            end = _balanced(text, j, "{", "}")
        elif text.startswith("for", j):  # a nested loop without braces: through its own body
            inner = LOOP.match(text, j)
            assert inner, text[j:j + 80]
            k = inner.end()
            while text[k].isspace():
                k += 1
            end = _balanced(text, k, "{", "}") if text[k] == "{" else text.index(";", k) + 1
        else:
            end = text.index(";", j) + 1
        out.append(Loop(m.group(1), m.start(), text[j:end]))
    return out


def _accesses(body: str) -> list[tuple[str, list[str]]]:
    """Every ``name[..][..]`` in ``body``: the name and its subscripts (nested ones allowed)."""
    out = []
    for m in re.finditer(r"\b(\w+)\[", body):
        subs, j = [], m.end() - 1
        while j < len(body) and body[j] == "[":
            end = _balanced(body, j, "[", "]")
            subs.append(body[j + 1:end - 1])
            j = end
        out.append((m.group(1), subs))
    return out


def _inline_params(text: str) -> set[str]:
    """Array parameters of functions that Vitis inlines: the caller's banks apply to them."""
    out = set()
    for m in re.finditer(r"\n(?:inline )?\w+ \w+\(([^)]*)\) \{\n#pragma HLS INLINE", text):
        out |= set(DECL.findall(m.group(1)))
    return out


def _lanes(node: Node) -> int:
    return node.parallelism if isinstance(node, Linear) else elements_per_beat(Kind.DATA)


def _zoo_graph(name: str) -> GraphCore:
    """Model ``name`` with each Linear given the next of PARALLELISMS."""
    graph = MODELS[name].build()
    linears = [n.name for n in graph.nodes.values() if isinstance(n, Linear)]
    nodes = {n: {"parallelism": p} for n, p in zip(linears, cycle(PARALLELISMS))}
    return config_from_dict({"nodes": nodes}).apply(graph)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HlsProject]:
    root = tmp_path_factory.mktemp("zoo")
    return {name: generate_hls(build_design(_zoo_graph(name), DeviceOptions()), root / name) for name in MODELS}


def _kernel_text(project: HlsProject, top: str) -> str:
    return _synthesized((project.root / "kernels" / f"{top}.cpp").read_text())


def _partitions_before(text: str, var: str, start: int) -> set[tuple[int, int]]:
    """(factor, dim) of the partitions of ``var`` between its last declaration before ``start``
    and ``start``: the ones in scope for the declaration a loop there uses."""
    decls = [m.start() for m in DECL.finditer(text, 0, start) if m.group(1) == var]
    assert decls, f"{var} used at {start} but never declared before"
    return {(int(m.group(2)), int(m.group(3))) for m in PARTITION.finditer(text, decls[-1], start)
            if m.group(1) == var}


def _dims(text: str, name: str) -> list[str]:
    """The extents of array ``name`` as first declared (its subscripts)."""
    m = re.search(rf"\b(?:int16_t|int64_t) {name}((?:\[\w+\])+)", text)
    assert m, name
    return re.findall(r"\[(\w+)\]", m.group(1))


def _row_loop_faults(text: str, lanes: int) -> tuple[int, list[str]]:
    """The innermost loops of ``text`` that walk a payload row, and what each lacks."""
    payload, skip = set(DECL.findall(text)), _inline_params(text)
    checked, faults = 0, []
    for loop in _loops(text):
        if LOOP.search(loop.body):
            continue  # not innermost
        walked = [(name, subs.index(s)) for name, subs in _accesses(loop.body) if name in payload
                  for s in subs if re.search(rf"\b{loop.var}\b", s)]
        if not any(d == len(_dims(text, name)) - 1 for name, d in walked):
            continue  # walks no payload row
        checked += 1
        where = f"loop over {loop.var} at {loop.start}"
        for pragma in ("#pragma HLS PIPELINE II=1", f"#pragma HLS UNROLL factor={lanes}"):
            if pragma not in loop.pragmas:
                faults.append(f"{where}: no {pragma}")
        faults += [f"{where}: {name} dim {d + 1} not in {lanes} cyclic banks" for name, d in walked
                   if name not in skip and (lanes, d + 1) not in _partitions_before(text, name, loop.start)]
    return checked, faults


def test_every_row_loop_is_pipelined_unrolled_and_banked(zoo: dict[str, HlsProject]) -> None:
    checked = 0
    for model, project in zoo.items():
        for kernel in project.design.nodes.values():
            n, faults = _row_loop_faults(_kernel_text(project, kernel.top), _lanes(kernel.node))
            assert not faults, (model, kernel.top, faults)
            checked += n
    assert checked > 100  # the zoo's row and MAC loops, not a vacuous pass


def test_each_linear_does_parallelism_macs_a_cycle(zoo: dict[str, HlsProject]) -> None:
    """Weights, cached inputs and gradient accumulators banked by the node's own parallelism on
    the input-feature dimension (and the weights on the output one too: dx walks it), and its
    MAC loops (forward, dx unless the design skips it, gradient) pipelined at II=1 and unrolled
    by it."""
    seen = set()
    for project in zoo.values():
        for kernel in project.design.nodes.values():
            node = kernel.node
            if not isinstance(node, Linear):
                continue
            text = _kernel_text(project, kernel.top)
            p = node.parallelism
            seen.add(p)
            banks = {(m.group(1), int(m.group(2)), int(m.group(3))) for m in PARTITION.finditer(text)}
            want = {("W", p, 2), ("cached_x", p, 3), ("G", p, 2)} | (set() if kernel.skip_dx else {("W", p, 1)})
            assert {b for b in banks if b[0] in ("W", "cached_x", "G")} == want, (node.name, banks)
            macs = [loop for loop in _loops(text) if not LOOP.search(loop.body) and re.search(r"\+=.*\*", loop.body)]
            assert len(macs) == (2 if kernel.skip_dx else 3), node.name
            for loop in macs:
                assert loop.pragmas == ["#pragma HLS PIPELINE II=1", f"#pragma HLS UNROLL factor={p}"], node.name
    assert seen == set(PARALLELISMS)


def test_the_checks_bite(zoo: dict[str, HlsProject]) -> None:
    """A MAC loop without its PIPELINE, banks of the wrong factor, or a loop left unrolled by a
    beat's lanes where the node's parallelism belongs: each is a fault."""
    project = zoo["mlp"]
    kernel = next(k for k in project.design.nodes.values() if isinstance(k.node, Linear) and not k.skip_dx)
    text = _kernel_text(project, kernel.top)
    p = kernel.node.parallelism
    assert _row_loop_faults(text, p)[1] == []
    mutants = [
        text.replace("#pragma HLS PIPELINE II=1\n", "", 1),
        text.replace(f"variable=cached_x type=cyclic factor={p} dim=3", "variable=cached_x type=cyclic factor=1 dim=3"),
        text.replace(f"#pragma HLS UNROLL factor={p}\n", f"#pragma HLS UNROLL factor={elements_per_beat(Kind.DATA)}\n", 1),
        text.replace(f"variable=W type=cyclic factor={p} dim=1", f"variable=W type=cyclic factor={p} dim=2"),
    ]
    for mutant in mutants:
        assert mutant != text
        assert _row_loop_faults(mutant, p)[1], mutant


def test_a_linear_above_its_input_width_does_its_rows_a_cycle(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A Linear of parallelism Q x its row lanes (``Linear.outputs_per_step``): its MAC loops walk
    the outputs Q at a time, pipelined at II=1, each with its row of inputs wholly unrolled (the
    forward and dx around the output loop, dW around the rows with its Q rows of G unrolled), and
    W, G and the cached inputs are banked Q ways on the outputs and by the row's lanes on the
    inputs."""
    from amp_hls.ir import Graph

    g = Graph("rows")
    h = g.tanh(g.source("x", width=10), name="act")
    g.loss(g.linear(h, 8, name="fg", parallelism=24), g.source("t", width=8), "mse")
    project = generate_hls(build_design(g, DeviceOptions()), tmp_path)
    kernel = project.design.nodes["fg"]
    node = kernel.node
    assert isinstance(node, Linear) and (node.outputs_per_step, node.row_lanes) == (2, 12)
    text = _kernel_text(project, kernel.top)
    banks = {(m.group(1), int(m.group(2)), int(m.group(3))) for m in PARTITION.finditer(text)}
    assert {b for b in banks if b[0] in ("W", "cached_x", "G")} == {
        ("W", 12, 2), ("W", 2, 1), ("G", 12, 2), ("G", 2, 1), ("cached_x", 12, 3)}
    macs = [loop for loop in _loops(text) if not LOOP.search(loop.body) and re.search(r"\+=.*\*", loop.body)]
    assert len(macs) == 3 and all(loop.pragmas == ["#pragma HLS UNROLL"] for loop in macs)
    loops = _loops(text)
    pipelined = []  # per MAC loop: the nearest loop around it that is pipelined, and what lies between
    for mac in macs:
        around = sorted((lp for lp in loops if lp.start < mac.start and mac.body in lp.body), key=lambda lp: -lp.start)
        k = next(i for i, lp in enumerate(around) if "#pragma HLS PIPELINE II=1" in lp.pragmas)
        assert all(lp.pragmas == ["#pragma HLS UNROLL"] for lp in around[:k]), mac.start
        pipelined.append((around[k].var, around[k].pragmas))
    assert pipelined == [("o", ["#pragma HLS PIPELINE II=1", "#pragma HLS UNROLL factor=2"]),  # dx
                         ("r", ["#pragma HLS PIPELINE II=1"]),  # dW: a row of dy and x a cycle, 2 rows of G
                         ("o", ["#pragma HLS PIPELINE II=1", "#pragma HLS UNROLL factor=2"])]  # forward
