"""The RTL routing kernels (split, broadcast, cond, phi, isu) agree with the numpy kernels, bit for
bit and under back-pressure, and their cycle models hold against the RTL.

One graph holds a node of every variant whose hardware differs: splits with aligned and unaligned
slices, broadcasts to 2 and 3 outputs and of an index edge, a cond per comparison (state word or
constant), phis of 2 and 3 inputs with different row limits, and an isu per state-update op plus
two chains. Their kernels are built once under Verilator, side by side in ``amp_harness``.

``test_bit_exact`` runs ``amp_hls.sim.routing_tb`` once per kind, every variant at once: forward messages
with several tags (sharing keys, differing in state words), gradients going back as their forwards
come out, random TVALID/TREADY stalls on every stream, and a tag table of ``SLOTS`` entries, fewer
than the tags in flight, so phi forwards wait for room and split/broadcast gradients of new tags
are held (their later ports start late, so out0_grad runs ahead and fills the table). Every output must equal the numpy kernel's (``NumericConfig('fixed')``), with exactly
the messages numpy emits on each port (conservation: nothing lost or duplicated) and the numpy
kernel left empty. Then messages numpy rejects must raise ``amp_error`` and come out nowhere.

``test_cycle_model`` runs back-to-back messages with no stalls and holds ``amp_hls.cycles`` within
15% of the cycles measured per message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.rtl import HARNESS, generate_rtl
from amp_hls.cycles import message_cycles
from amp_hls.design import DeviceOptions, build_design, kernel_ports
from amp_hls.errors import AmpHlsError, KernelError
from amp_hls.ir import Graph, IsuOp, S
from amp_hls.ir.nodes import dec, inc, parent, pop, push
from amp_hls.kinds import make_kernel
from amp_hls.message import MAX_STATE_WORDS, Direction, Message, Tag
from tests.helpers import FIXED, wide_values

runner = pytest.importorskip("amp_hls.sim.runner")
pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

SLOTS, N, ROWS = 4, 12, 3  # tag-table entries, tags per kernel, max rows
CHILD = IsuOp("child", 0, 0)

SPLITS = {"sp3": (10, (3, 6, 1)), "sp2": (8, (4, 4))}  # unaligned and aligned slices
BROADCASTS = {"bc2": 2, "bc3": 3}
CONDS = {"c_lt": S[0] < S[1], "c_eq": S[1] == 3, "c_ge": S[2] >= 4, "c_ne": S[0] != S[3],
         "c_gt": S[1] > 2, "c_le": S[3] <= S[2]}
PHIS = {"phi2": (2, 3), "phi3": (1, 3, 2)}  # max_rows of each input
ISUS = {"i_inc": (inc(0, 2),), "i_dec": (dec(1, 3),), "i_push": (push(7),), "i_pop": (pop(7),),
        "i_parent": (parent(1),), "i_child": (CHILD,), "i_climb": (inc(0, 2), push(7), parent(0)),
        "i_descend": (CHILD, pop(4), dec(0, 3))}
KINDS = {"split": [*SPLITS], "broadcast": [*BROADCASTS, "bci"], "cond": [*CONDS], "phi": [*PHIS],
         "isu": [*ISUS]}
NODES = [n for names in KINDS.values() for n in names]


def _graph() -> Graph:
    g = Graph("rtl_routing")
    for name, (width, sizes) in SPLITS.items():
        for y in g.split(g.source(f"{name}_x", width=width, max_rows=ROWS), sizes, name=name):
            g.sink(y)
    for name, arity in BROADCASTS.items():
        for y in g.broadcast(g.source(f"{name}_x", width=6, max_rows=ROWS), arity, name=name):
            g.sink(y)
    for y in g.broadcast(g.source("bci_x", width=1, dtype="index"), 2, name="bci"):
        g.sink(y)
    for name, predicate in CONDS.items():
        for y in g.cond(g.source(f"{name}_x", width=5, max_rows=ROWS), predicate, name=name):
            g.sink(y)
    for name, rows in PHIS.items():
        g.sink(g.phi(*(g.source(f"{name}_x{i}", width=5, max_rows=r) for i, r in enumerate(rows)), name=name))
    for name, ops in ISUS.items():
        g.sink(g.isu(g.source(f"{name}_x", width=3, max_rows=2), *ops, name=name))
    return g


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The graph and the one Verilator build of its routing kernels."""
    g = _graph()
    root = tmp_path_factory.mktemp("rtl_routing")
    files = generate_rtl(build_design(g, DeviceOptions(cache_slots=SLOTS)), NODES, root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


# --- stimulus ----------------------------------------------------------------------------------

def _values(rng: np.random.Generator, shape: tuple[int, int], index: bool = False) -> list[list[int]]:
    """``wide_values`` (so broadcast sums saturate); index rows small."""
    if index:
        return rng.integers(0, 10, shape).tolist()
    return wide_values(rng, shape)


def _word(rng: np.random.Generator) -> int:
    """A state word: small values (loop counters, heap positions, child bits), the constants the
    nodes push and test, and now and then anything 16 bits hold."""
    pick = rng.random()
    if pick < 0.5:
        return int(rng.integers(0, 6))
    if pick < 0.75:
        return int(rng.choice([4, 7, 65534, 65535]))
    return int(rng.integers(0, 2**16))


def _tags(rng: np.random.Generator, ok: Callable[[tuple[int, ...]], bool], n: int = N) -> list[Tag]:
    """``n`` distinct tags whose states pass ``ok``, over a few keys (tags share keys and differ
    in state words)."""
    keys = [int(k) for k in rng.integers(0, 2**32, 4)]
    tags: list[Tag] = []
    for _ in range(100_000):
        state = tuple(_word(rng) for _ in range(int(rng.integers(0, MAX_STATE_WORDS + 1))))
        tag = Tag(keys[int(rng.integers(0, len(keys)))], state)
        if ok(state) and tag not in tags:
            tags.append(tag)
            if len(tags) == n:
                return tags
    raise AssertionError("no valid states found")


def _isu_ok(ops: tuple[IsuOp, ...]) -> Callable[[tuple[int, ...]], bool]:
    def ok(state: tuple[int, ...]) -> bool:
        try:
            for op in ops:
                state = op.apply(state)
        except ValueError:
            return False
        return True
    return ok


def _doc(tag: Tag, payload: list[list[int]]) -> dict:
    return {"key": tag.key, "state": list(tag.state), "payload": payload}


def _msg(doc: dict, direction: Direction) -> Message:
    return Message(Tag(doc["key"], tuple(doc["state"])), direction, np.array(doc["payload"], dtype=np.int64))


def _windowed(rng: np.random.Generator, items: list, window: int) -> list:
    """``items`` shuffled within consecutive blocks of ``window``: out of order, yet a join with
    more than ``window`` entries always has room for the tag every port waits on."""
    out: list = []
    for i in range(0, len(items), window):
        block = items[i:i + window]
        out += [block[j] for j in rng.permutation(len(block))]
    return out


def _tags_for(g: Graph, name: str, rng: np.random.Generator) -> list[Tag]:
    node = g.nodes[name]
    if node.kind == "isu":
        return _tags(rng, _isu_ok(node.ops))
    if node.kind == "cond":
        p = node.predicate
        need = max(p.index, p.rhs_state if p.rhs_state is not None else 0) + 1
        return _tags(rng, lambda s: len(s) >= need and all(w < 9 for w in s))  # so predicates vary
    return _tags(rng, lambda s: True)


def _bad(g: Graph, name: str, rng: np.random.Generator) -> list[dict]:
    """Messages the numpy kernel rejects: an isu update that fails, a cond predicate reading a
    word the tag lacks, a gradient for a tag phi never saw, a second part for one tag."""
    node = g.nodes[name]
    width, rows = g.spec(name, 0).width, 1
    if node.kind == "isu":
        tag = _tags(rng, lambda s: not _isu_ok(node.ops)(s), 1)[0]
        return [{"port": "in0", "doc": _doc(tag, _values(rng, (rows, width)))}]
    if node.kind == "cond":
        p = node.predicate
        need = max(p.index, p.rhs_state if p.rhs_state is not None else 0) + 1
        tag = _tags(rng, lambda s: len(s) == need - 1, 1)[0]
        return [{"port": "in0", "doc": _doc(tag, _values(rng, (rows, width)))}]
    tag = Tag(12345, (1, 2, 3))  # not among the tags sent
    doc = _doc(tag, _values(rng, (rows, width), g.spec(name, 0).dtype == "index"))
    if node.kind == "phi":
        return [{"port": "out0_grad", "doc": doc}]
    return [{"port": "out0_grad", "doc": doc}, {"port": "out0_grad", "doc": doc}]


def _stimulus(g: Graph, name: str, rng: np.random.Generator) -> tuple[dict, dict[str, list[dict]]]:
    """The bench's stimulus for node ``name`` and what numpy emits on each output port."""
    node = g.nodes[name]
    in_specs = [g.input_spec(name, i) for i in range(node.n_inputs)]
    index = in_specs[0].dtype == "index"
    kernel = make_kernel(node, g, FIXED)
    fwd: dict[str, list[dict]] = {f"in{i}": [] for i in range(node.n_inputs)}
    want: dict[str, list[dict]] = {p: [] for p in kernel_ports(node) if p.startswith("out") != p.endswith("_grad")}
    grads: dict[str, list[dict]] = {f"out{j}_grad": [] for j in range(node.n_outputs)}
    for tag in _tags_for(g, name, rng):
        i = int(rng.integers(0, node.n_inputs))
        spec = in_specs[i]
        doc = _doc(tag, _values(rng, (int(rng.integers(1, spec.max_rows + 1)), spec.width), index))
        fwd[f"in{i}"].append(doc)
        for j, y in kernel.forward(i, [_msg(doc, Direction.FWD)]):
            want[f"out{j}"].append(_doc(y.tag, y.payload.tolist()))
            grads[f"out{j}_grad"].append(_doc(y.tag, _values(rng, y.payload.shape)))
    joins = node.kind in ("split", "broadcast")
    if joins:  # every port in forward order, shuffled within windows the tag table can hold
        grads = {p: _windowed(rng, docs, SLOTS - 1) for p, docs in grads.items()}
    for port, docs in grads.items():
        for doc in docs:
            for i, dx in kernel.backward(int(port[3:-5]), [_msg(doc, Direction.BWD)]):
                want[f"in{i}_grad"].append(_doc(dx.tag, dx.payload.tolist()))
    assert kernel.pending() == 0
    bad = _bad(g, name, rng)
    fresh = make_kernel(node, g, FIXED)
    with pytest.raises(KernelError):  # numpy rejects them too
        for b in bad:
            m = _msg(b["doc"], Direction.BWD if b["port"].endswith("_grad") else Direction.FWD)
            if b["port"].endswith("_grad"):
                fresh.backward(int(b["port"][3:-5]), [m])
            else:
                fresh.forward(int(b["port"][2:]), [m])
    stim = {"name": name, "prefix": f"{name}_", "shapes": _shapes(g, name), "fwd": fwd, "grads": grads,
            "order": "fixed" if joins else "released", "lag": 300 if joins else 0,
            "expect": {p: len(d) for p, d in want.items()}, "bad": bad}
    return stim, want


def _shapes(g: Graph, name: str) -> dict[str, list[int]]:
    """Width and max_rows of every stream of node ``name``, by port."""
    shapes = {}
    for p in kernel_ports(g.nodes[name]):
        if p.startswith("in"):
            spec = g.input_spec(name, int(p[2:].removesuffix("_grad")))
        else:
            spec = g.spec(name, int(p[3:].removesuffix("_grad")))
        shapes[p] = [spec.width, spec.max_rows]
    return shapes


def _run(build_dir: Path, tmp_path: Path, stim: dict) -> dict:
    (tmp_path / "stim.json").write_text(json.dumps(stim))
    env = {"AMP_SIM_STIMULUS": str(tmp_path / "stim.json"), "AMP_SIM_RESULT": str(tmp_path / "result.json")}
    runner.run(build_dir, HARNESS, "amp_hls.sim.routing_tb", tmp_path / "run", env)
    return json.loads((tmp_path / "result.json").read_text())


def _key(doc: dict) -> tuple:
    return doc["key"], tuple(doc["state"])


@pytest.mark.parametrize("kind", KINDS)
def test_bit_exact(kind: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    g, build_dir = harness
    rng = np.random.default_rng(sum(map(ord, kind)))
    stims, wants = zip(*(_stimulus(g, name, rng) for name in KINDS[kind]))
    results = _run(build_dir, tmp_path, {"mode": "exact", "seed": int(rng.integers(2**31)), "stall": 0.3,
                                         "kernels": list(stims)})
    for stim, want in zip(stims, wants):
        name = stim["name"]
        got = results[name]["result"]
        counts = {p: len(d) for p, d in got["out"].items()}
        assert not results[name].get("timeout"), f"{name}: timed out with {counts} messages out, want {stim['expect']}"
        for port, docs in want.items():
            out = got["out"][port]
            assert len(out) == len(docs), f"{name} {port}: {len(out)} messages, numpy sent {len(docs)}"
            assert {_key(d): d for d in out} == {_key(d): d for d in docs}, f"{name} {port}: RTL != numpy"
            if g.nodes[name].n_inputs == 1 and not port.endswith("_grad"):  # forward order kept
                assert [_key(d) for d in out] == [_key(d) for d in docs], f"{name} {port}: order changed"
        assert got["extra"] == 0 and got["unexpected"] == 0, f"{name}: messages beyond what numpy sent"
        assert got["error"] == 0, f"{name}: amp_error on good messages"
        assert got["bad_error"] == 1, f"{name}: bad messages did not raise amp_error"
        assert got["bad_extra"] == 0, f"{name}: a bad message came out"


# --- cycle model -------------------------------------------------------------------------------

def _cycle_phases(g: Graph, name: str, rng: np.random.Generator) -> tuple[list[dict], list[float]]:
    """Back-to-back phases for node ``name`` (forward, then the gradients of those tags, rows at
    the edge's maximum) and the cycles per message the model predicts for each."""
    node = g.nodes[name]
    in_specs = [g.input_spec(name, i) for i in range(node.n_inputs)]
    rows = in_specs[0].max_rows
    count = SLOTS if node.kind in ("phi", "split", "broadcast") else 2 * SLOTS  # within the tag table
    tags = _tags_for(g, name, rng)[:count]
    kernel = make_kernel(node, g, FIXED)
    index = in_specs[0].dtype == "index"
    fwd, grads = [], {f"out{j}_grad": [] for j in range(node.n_outputs)}
    for tag in tags:
        doc = _doc(tag, _values(rng, (rows, in_specs[0].width), index))
        fwd.append(doc)
        for j, y in kernel.forward(0, [_msg(doc, Direction.FWD)]):
            grads[f"out{j}_grad"].append(_doc(y.tag, _values(rng, y.payload.shape)))
    grads = {p: d for p, d in grads.items() if d}
    copies = node.n_outputs if node.kind in ("split", "broadcast") else 1  # outputs per forward
    phases = [{"send": {"in0": fwd}, "outputs": count * copies}, {"send": grads, "outputs": count}]
    options = DeviceOptions(cache_slots=SLOTS)
    predicted = [float(message_cycles(g, name, options, "in0", rows)),
                 float(np.mean([message_cycles(g, name, options, p, rows) for p in grads]))]
    return phases, predicted


@pytest.fixture(scope="session")
def cycles(harness: tuple[Graph, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Measured and predicted cycles per message, per node and phase (one simulation for all)."""
    g, build_dir = harness
    rng = np.random.default_rng(3)
    kernels, predicted = [], {}
    for name in NODES:
        phases, predicted[name] = _cycle_phases(g, name, rng)
        kernels.append({"name": name, "prefix": f"{name}_", "phases": phases,
                        "shapes": _shapes(g, name)})
    results = _run(build_dir, tmp_path_factory.mktemp("cycles"),
                   {"mode": "cycles", "seed": 5, "stall": 0.0, "kernels": kernels})
    return {"predicted": predicted, "results": results}


@pytest.mark.parametrize("name", NODES)
def test_cycle_model(name: str, cycles: dict) -> None:
    result = cycles["results"][name]
    assert not result.get("timeout"), f"{name}: timed out"
    for phase, want in zip(result["result"]["phases"], cycles["predicted"][name]):
        measured = (phase["last"] - phase["first"] + 1) / phase["messages"]
        assert abs(want - measured) <= 0.15 * measured, f"{name}: model {want} vs RTL {measured:.2f} cycles/message"


def test_cycle_model_rejects_bad_queries() -> None:
    g = _graph()
    options = DeviceOptions(cache_slots=SLOTS)
    with pytest.raises(AmpHlsError, match="no input port 'in1'"):
        message_cycles(g, "sp3", options, "in1", 1)
    with pytest.raises(AmpHlsError, match="at least one row"):
        message_cycles(g, "phi2", options, "in1", 0)
