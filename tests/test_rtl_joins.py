"""The RTL join kernels (add, mul, concat) and rowsum agree with the numpy kernels, bit for bit.

One graph holds a node of each kind plus the variants whose hardware differs: three inputs (the
round robin, mul's chained narrowing), inputs with different row limits, concat of widths that
are not multiples of the four elements a beat holds (parts straddle output beats: the row
buffer's lane-enabled path) and of parts that all start on a beat (the beats sent straight from
the part memories, the last part padded, the parts of different beats a row), rowsum over
one and over several rows. Their kernels, the boundary and ``amp_pkg`` are built once under
Verilator (``amp_hls.sim.runner``, cached by source hash) in one ``amp_harness``.

Each node runs ``amp_hls.sim.joins_tb`` once. Its mixed phase: twelve tags (some sharing a key, differing
in state words), each input port sending its parts in its own order (shuffled within windows of
``SLOTS`` tags, so no join can deadlock) and starting later than the port before, so the join
table of ``SLOTS`` entries fills and parts of new tags wait for room while parts of open tags
still get in; gradients go back in random order as forwards come out; random TVALID/TREADY stalls
on every stream. Values are half small, half over the whole 16-bit range, so sums, products and
gradients saturate. Every output must equal the numpy kernel's (``NumericConfig('fixed')``), one
forward and one gradient per input per tag (conservation). Its timing phase sends back-to-back
messages with no stalls; the cycles between accepted messages must be within 15% of the kind's
cycle model (``amp_hls.cycles``). Its error cases (a second part for one tag on one port, parts
that differ in rows, a gradient with no forward) must each set ``amp_error``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.rtl import HARNESS, generate_rtl, render_kernel
from amp_hls.design import DeviceOptions, build_design
from amp_hls.ir import Graph
from amp_hls.kinds import cycle_model, make_kernel
from amp_hls.message import Direction, Message, Tag
from tests.helpers import FIXED, distinct_tags, wide_values

runner = pytest.importorskip("amp_hls.sim.runner")
pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

SLOTS, N, TIMED = 4, 12, 4  # join-table entries; tags in the mixed phase; messages per timed batch
OPTIONS = DeviceOptions(cache_slots=SLOTS)

# node -> (kind, input (width, max_rows)s)
NODES: dict[str, tuple[str, list[tuple[int, int]]]] = {
    "add": ("add", [(6, 3), (6, 3)]),
    "add3": ("add", [(4, 2), (4, 1), (4, 2)]),
    "mul": ("mul", [(5, 3), (5, 3)]),
    "mul3": ("mul", [(3, 2), (3, 2), (3, 2)]),
    "cat": ("concat", [(6, 3), (5, 3)]),
    "cat3": ("concat", [(3, 2), (4, 2), (2, 2)]),
    "cat_aligned": ("concat", [(8, 3), (4, 3), (6, 3)]),
    "rsum": ("rowsum", [(6, 4)]),
    "rsum1": ("rowsum", [(3, 1)]),
}


def _graph() -> Graph:
    """Every node of ``NODES`` fed by its own sources, its output into an mse loss."""
    g = Graph("rtl_joins")
    for name, (kind, shapes) in NODES.items():
        xs = [g.source(f"{name}_x{i}", width=w, max_rows=r) for i, (w, r) in enumerate(shapes)]
        y = getattr(g, kind)(*xs, name=name)
        g.loss(y, g.source(f"{name}_t", width=y.width, max_rows=y.spec.max_rows), "mse")
    return g


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The graph and the one Verilator build of its join and rowsum kernels and boundary."""
    g = _graph()
    root = tmp_path_factory.mktemp("rtl_joins")
    files = generate_rtl(build_design(g, OPTIONS), list(NODES), root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


def _doc(tag: Tag, payload: list[list[int]]) -> dict:
    return {"key": tag.key, "state": list(tag.state), "payload": payload}


def _case(g: Graph, name: str, rng: np.random.Generator, tags: list[Tag], rows: list[int]) -> tuple[list, list]:
    """Every input's part and the gradient of each tag: ``(parts per port, grads)``, tag order."""
    in_specs = [g.input_spec(name, i) for i in range(g.nodes[name].n_inputs)]
    out = g.spec(name, 0)
    parts = [[_doc(t, wide_values(rng, (r, s.width))) for t, r in zip(tags, rows)] for s in in_specs]
    grads = [_doc(t, wide_values(rng, (min(r, out.max_rows), out.width))) for t, r in zip(tags, rows)]
    return parts, grads


def _shuffled(rng: np.random.Generator, docs: list[dict]) -> list[dict]:
    """``docs`` in a random order within consecutive windows of ``SLOTS``: however far one port
    runs ahead, the tags open in the table are those of one window, so a join cannot deadlock."""
    out = []
    for w in range(0, len(docs), SLOTS):
        window = docs[w : w + SLOTS]
        out += [window[i] for i in rng.permutation(len(window))]
    return out


def _stimulus(g: Graph, name: str) -> dict:
    rng = np.random.default_rng(sum(map(ord, name)))
    in_specs = [g.input_spec(name, i) for i in range(g.nodes[name].n_inputs)]
    max_rows = min(s.max_rows for s in in_specs)  # the parts of one tag share their rows
    tags = distinct_tags(rng, N)
    parts, grads = _case(g, name, rng, tags, [int(rng.integers(1, max_rows + 1)) for _ in tags])
    timing = []
    for r in sorted({1, max_rows}):
        t_tags = distinct_tags(rng, TIMED)
        t_parts, t_grads = _case(g, name, rng, t_tags, [r] * TIMED)
        timing.append({"rows": r, "inputs": t_parts, "grads": t_grads})
    out = g.spec(name, 0)
    return {
        "prefix": f"{name}_", "seed": int(rng.integers(2**31)),
        "in_shapes": [[s.width, s.max_rows] for s in in_specs], "out_shape": [out.width, out.max_rows],
        "mixed": {"stall": 0.3, "lag": 100, "inputs": [_shuffled(rng, p) for p in parts], "grads": grads,
                  "parts": parts},
        "timing": timing,
        "errors": _bad_cases(g, name, rng),
    }


def _bad_cases(g: Graph, name: str, rng: np.random.Generator) -> list[dict]:
    """Messages the kernel must refuse (``amp_error``), each sent alone after a reset."""
    node = g.nodes[name]
    in_specs = [g.input_spec(name, i) for i in range(node.n_inputs)]
    tag = distinct_tags(rng, 1)[0]
    part = _doc(tag, wide_values(rng, (1, in_specs[0].width)))
    cases = [{"what": "a second forward message for one tag", "msgs": [["in0", part], ["in0", part]]}]
    if node.kind in ("mul", "rowsum"):
        grad = _doc(tag, wide_values(rng, (1, g.spec(name, 0).width)))
        cases.append({"what": "a gradient with no forward", "msgs": [["out0_grad", grad]]})
    if node.n_inputs > 1 and min(s.max_rows for s in in_specs) > 1:
        other = _doc(tag, wide_values(rng, (2, in_specs[1].width)))
        cases.append({"what": "parts of one tag that differ in rows", "msgs": [["in0", part], ["in1", other]]})
    return cases


def _numpy(g: Graph, name: str, parts: list[list[dict]], grads: list[dict]) -> tuple[dict, list[dict]]:
    """The numpy kernel's forward output per tag and gradient per input per tag."""
    kernel = make_kernel(g.nodes[name], g, FIXED)
    fwd: dict[Tag, list] = {}
    for p, docs in enumerate(parts):
        for d in docs:
            tag = Tag(d["key"], tuple(d["state"]))
            for _, y in kernel.forward(p, [Message(tag, Direction.FWD, np.array(d["payload"]))]):
                fwd[y.tag] = y.payload.tolist()
    bwd: list[dict] = [{} for _ in parts]
    for d in grads:
        tag = Tag(d["key"], tuple(d["state"]))
        for p, dx in kernel.backward(0, [Message(tag, Direction.BWD, np.array(d["payload"]))]):
            bwd[p][tag] = dx.payload.tolist()
    assert kernel.pending() == 0
    return fwd, bwd


def _by_tag(docs: list[dict]) -> dict[Tag, list]:
    got = {Tag(d["key"], tuple(d["state"])): d["payload"] for d in docs}
    assert len(got) == len(docs), "a tag came out twice"
    return got


def _check(g: Graph, name: str, parts: list[list[dict]], grads: list[dict], fwd: list[dict], bwd: list[list[dict]]) -> None:
    want_fwd, want_bwd = _numpy(g, name, parts, grads)
    got = _by_tag(fwd)
    assert got.keys() == want_fwd.keys(), f"{name} fwd: messages lost or duplicated"
    for tag, payload in want_fwd.items():
        assert got[tag] == payload, f"{name} fwd {tag}: RTL {got[tag]} != numpy {payload}"
    assert len(bwd) == len(want_bwd)
    for p, (docs, want) in enumerate(zip(bwd, want_bwd)):
        got = _by_tag(docs)
        assert got.keys() == want.keys(), f"{name} in{p}_grad: messages lost or duplicated"
        for tag, payload in want.items():
            assert got[tag] == payload, f"{name} in{p}_grad {tag}: RTL {got[tag]} != numpy {payload}"


_RUNS: dict[str, tuple[dict, dict]] = {}


def _run(harness: tuple[Graph, Path], name: str, tmp: Path) -> tuple[dict, dict]:
    """``(stimulus, result)`` of node ``name``'s bench, run once per session."""
    if name not in _RUNS:
        g, build_dir = harness
        stim = _stimulus(g, name)
        (tmp / "stim.json").write_text(json.dumps(stim))
        env = {"AMP_SIM_STIMULUS": str(tmp / "stim.json"), "AMP_SIM_RESULT": str(tmp / "result.json")}
        runner.run(build_dir, HARNESS, "amp_hls.sim.joins_tb", tmp / "run", env)
        _RUNS[name] = stim, json.loads((tmp / "result.json").read_text())
    return _RUNS[name]


@pytest.mark.parametrize("name", list(NODES))
def test_bit_exact_under_stalls(name: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    g, _ = harness
    stim, result = _run(harness, name, tmp_path)
    mixed = result["mixed"]
    assert mixed["error"] == 0 and mixed["extra"] == 0
    _check(g, name, stim["mixed"]["parts"], stim["mixed"]["grads"], mixed["fwd"], mixed["bwd"])
    for batch, got in zip(stim["timing"], result["timing"]):  # the timed messages are right too
        _check(g, name, batch["inputs"], batch["grads"], got["fwd"], got["bwd"])


def _interval(times: list[int]) -> float:
    """Steady-state cycles between consecutive accepted messages."""
    assert len(times) == TIMED, f"{len(times)} headers seen, {TIMED} sent"
    return statistics.median(b - a for a, b in zip(times, times[1:]))


@pytest.mark.parametrize("name", list(NODES))
def test_cycle_model_within_15_percent(name: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    g, _ = harness
    _, result = _run(harness, name, tmp_path)
    node = g.nodes[name]
    in_specs = [g.input_spec(name, i) for i in range(node.n_inputs)]
    model = cycle_model(node.kind)
    for batch in result["timing"]:
        for port, times in (("in0", batch["fwd_times"]), ("out0_grad", batch["bwd_times"])):
            measured = _interval(times)
            expected = model.message_cycles(node, in_specs, [g.spec(name, 0)], OPTIONS, port, batch["rows"])
            print(f"{name} {port} rows={batch['rows']}: model {expected}, RTL {measured}")
            assert abs(expected - measured) <= 0.15 * measured, (
                f"{name} {port} rows={batch['rows']}: model {expected} cycles, RTL {measured}"
            )


@pytest.mark.parametrize(("name", "on_beats"), [("cat", False), ("cat3", False), ("cat_aligned", True)])
def test_concat_cases_take_both_forward_paths(name: str, on_beats: bool, harness: tuple[Graph, Path]) -> None:
    """The bit-exact and timing cases above cover both of concat's forward paths: the beats sent
    straight from the part memories where every part starts on a beat (no S_LOAD pass), the row
    buffer loaded with lane enables (``rb_lane``) where one does not."""
    g, _ = harness
    text = render_kernel(build_design(g, OPTIONS), name)
    assert ("rb_lane" in text) == (not on_beats) and ("S_LOAD:" in text) == (not on_beats)


@pytest.mark.parametrize("name", list(NODES))
def test_bad_input_sets_amp_error(name: str, harness: tuple[Graph, Path], tmp_path: Path) -> None:
    stim, result = _run(harness, name, tmp_path)
    for case, raised in zip(stim["errors"], result["errors"], strict=True):
        assert raised == 1, f"{name}: {case['what']} did not set amp_error"
