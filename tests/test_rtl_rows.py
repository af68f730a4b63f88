"""The RTL row kernels (ungroup, group, aggregate) agree with the numpy kernels, bit for bit.

One graph holds two chains, ``x -> ungroup -> group -> aggregate(edges) -> loss``: chain A at width
6 (two beats a row, the second half padding), chain B at width 4 (one beat a row, no padding), with
different row and edge bounds. Its six row kernels are built once under Verilator (``amp_hls.sim.runner``,
cached by source hash) with a tag table smaller than the number of instances; ``amp_hls.sim.rows_tb``
drives all six at once (they share only the clock), so each check below is one simulation:

- bit-exact: instances with tags of 0-2 state words (some sharing a key), values over the whole
  16-bit range (aggregate sums saturate, forward and backward); row messages of a group arrive
  interleaved across parents and out of row order, row gradients of an ungroup in random order,
  an aggregate's node states and edges in different orders; random stalls on every stream;
  gradients go back as their forwards come out, in random order. Every output must equal the
  numpy kernel's (``NumericConfig('fixed')``), with exactly the expected number of messages on
  each port (conservation) and nothing left in the numpy kernel afterwards.
- bad input: after a reset, a row gradient of a parent never ungrouped, a row index i >= n, an edge
  endpoint beyond the instance's rows: the numpy kernel raises, the RTL kernel takes the message
  in, raises amp_error and sends nothing.
- cycles: instances of random sizes back to back with no stalls (forwards, then gradients); the
  cycles they cost must be within 15% of ``amp_hls.cycles.<kind>`` summed over their messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from amp_hls.codegen.rtl import HARNESS, generate_rtl
from amp_hls.cycles import message_cycles
from amp_hls.design import DeviceOptions, build_design
from amp_hls.errors import KernelError
from amp_hls.ir import Graph
from amp_hls.kernels import AggregateKernel, GroupKernel, UngroupKernel
from amp_hls.kernels.base import Kernel
from amp_hls.message import Direction, Message, Tag
from amp_hls.numerics import SaturationCounter
from tests.helpers import FIXED, distinct_tags

runner = pytest.importorskip("amp_hls.sim.runner")
pytestmark = [pytest.mark.verilator,
              pytest.mark.skipif(not runner.available(), reason="needs cocotb, cocotbext-axi, verilator")]

SLOTS, N = 6, 12  # more instances than tag-table slots: forwards wait for free entries
CHAINS = {"a": (6, 4, 8), "b": (4, 3, 5)}  # chain -> (width, max rows, max edges)
KERNELS = {"ungroup": UngroupKernel, "group": GroupKernel, "aggregate": AggregateKernel}
NODES = [f"{kind}_{c}" for c in CHAINS for kind in KERNELS]


def _graph() -> Graph:
    g = Graph("rtl_rows")
    for c, (width, rows, edges) in CHAINS.items():
        h = g.ungroup(g.source(f"x_{c}", width=width, max_rows=rows), name=f"ungroup_{c}")
        h = g.group(h, rows, name=f"group_{c}")
        h = g.aggregate(h, g.source(f"e_{c}", width=2, max_rows=edges, dtype="index"), name=f"aggregate_{c}")
        g.loss(h, g.source(f"t_{c}", width=width, max_rows=rows), "mse")
    return g


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Path]:
    """The graph and the one Verilator build of its six row kernels."""
    g = _graph()
    root = tmp_path_factory.mktemp("rtl_rows")
    files = generate_rtl(build_design(g, DeviceOptions(cache_slots=SLOTS)), NODES, root / "src")
    return g, runner.build(files.sources, HARNESS, root / "cache")


# --- stimulus ---------------------------------------------------------------------------------


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Half the elements small, half over the whole 16-bit range (so sums saturate)."""
    small = rng.integers(-(2**10), 2**10, shape)
    wide = rng.integers(-(2**15), 2**15, shape)
    return np.where(rng.random(shape) < 0.5, small, wide)


def _interleave(rng: np.random.Generator, groups: list[list[Message]], window: int) -> list[Message]:
    """The groups' messages merged: at most ``window`` groups started and unfinished at a time
    (so the tag table never waits on a message stuck behind a held one), picked at random."""
    pending = [list(gr) for gr in groups]
    active: list[list[Message]] = []
    out = []
    while pending or active:
        while pending and len(active) < window:
            active.append(pending.pop(0))
        gr = active[int(rng.integers(len(active)))]
        out.append(gr.pop(0))
        if not gr:
            active.remove(gr)
    return out


def _row_tag(parent: Tag, i: int, n: int) -> Tag:
    return Tag(parent.key, parent.state + (int(i), int(n)))


def _block_shuffle(rng: np.random.Generator, items: list, block: int) -> list:
    return [items[i + j] for i in range(0, len(items), block) for j in rng.permutation(len(items[i:i + block]))]


def _inputs(kind: str, c: str, rng: np.random.Generator, n: int, ordered: bool) -> dict[str, list[Message]]:
    """Forward messages of ``n`` instances of random sizes per input port; ``ordered``: one
    instance after another (else a group's rows interleave, an aggregate's parts come in
    different orders)."""
    width, max_rows, max_edges = CHAINS[c]
    tags = distinct_tags(rng, n, long_state=(5, 65535))  # 0-2 state words: room for a row index
    counts = [int(rng.integers(1, max_rows + 1)) for _ in tags]
    if kind == "ungroup":
        return {"in0": [Message(t, Direction.FWD, _values(rng, (k, width))) for t, k in zip(tags, counts)]}
    if kind == "group":
        groups = [[Message(_row_tag(t, i, k), Direction.FWD, _values(rng, (1, width))) for i in rng.permutation(k)]
                  for t, k in zip(tags, counts)]
        return {"in0": _interleave(rng, groups, 1 if ordered else SLOTS - 1)}
    xs = [Message(t, Direction.FWD, _values(rng, (k, width))) for t, k in zip(tags, counts)]
    es = []
    for t, k in zip(tags, counts):
        m = int(rng.integers(1, max_edges + 1))
        es.append(Message(t, Direction.FWD, rng.integers(0, k, (m, 2))))  # repeated ends: sums pile up
    if ordered:
        return {"in0": xs, "in1": es}
    return {"in0": _block_shuffle(rng, xs, 3), "in1": _block_shuffle(rng, es, 3)}


class Golden(NamedTuple):
    out: dict[str, list[Message]]  # what the numpy kernel sends, per output port
    saturated: dict[str, int]  # elements it saturated, per site


def _doc(m: Message) -> dict:
    return {"key": m.tag.key, "state": list(m.tag.state), "payload": np.asarray(m.payload).tolist()}


def _tag(doc: dict) -> Tag:
    return Tag(doc["key"], tuple(doc["state"]))


def _golden(kernel: Kernel, inputs: dict[str, list[Message]], rng: np.random.Generator
            ) -> tuple[dict[str, list[Message]], list[Message]]:
    """The numpy kernel's outputs per port for these inputs and random gradients of its forward
    outputs (forward in the order sent, each port's messages in turn; the numpy join pairs them)."""
    out: dict[str, list[Message]] = {"out0": [], "in0_grad": [], "in1_grad": []}
    for port, msgs in inputs.items():
        for m in msgs:
            out["out0"] += [y for _, y in kernel.forward(int(port[2:]), [m])]
    grads = [Message(y.tag, Direction.BWD, _values(rng, y.payload.shape)) for y in out["out0"]]
    for dy in grads:  # the numpy kernel's results do not depend on the gradients' order
        for p, dx in kernel.backward(0, [dy]):
            out[f"in{p}_grad"].append(dx)
    assert kernel.pending() == 0
    return {port: msgs for port, msgs in out.items() if msgs}, grads


def _stimulus(g: Graph, node: str, mode: str, n: int, seed: int) -> tuple[dict, Golden]:
    """One kernel's bench stimulus and the numpy kernel's outputs per port for it (and the
    values it saturated, per site)."""
    kind = g.nodes[node].kind
    rng = np.random.default_rng(seed)
    inputs = _inputs(kind, node[-1], rng, n, ordered=mode == "cycles")
    counter = SaturationCounter()
    want, grads = _golden(KERNELS[kind](g.nodes[node], g, FIXED, counter), inputs, rng)
    streams = {}
    for i in range(g.nodes[node].n_inputs):
        s = g.input_spec(node, i)
        streams[f"in{i}"] = streams[f"in{i}_grad"] = [s.width, s.max_rows]
    s = g.spec(node, 0)
    streams["out0"] = streams["out0_grad"] = [s.width, s.max_rows]
    stim = {"prefix": f"{node}_", "seed": int(rng.integers(2**31)), "stall": 0.3, "mode": mode,
            "streams": streams, "inputs": {p: [_doc(m) for m in ms] for p, ms in inputs.items()},
            "grads": [_doc(m) for m in grads], "expect": {p: len(ms) for p, ms in want.items()},
            "grad_wait": 150, "timeout_us": 500, "bad": {p: [_doc(m) for m in ms] for p, ms in _bad(kind, node[-1]).items()}}
    return stim, Golden(want, counter.as_dict())


def _bad(kind: str, c: str) -> dict[str, list[Message]]:
    """Per port, messages the kernel must refuse: a row gradient of a parent never ungrouped, a
    row index i >= n, an edge endpoint beyond the instance's rows."""
    width = CHAINS[c][0]
    tag = Tag(7, ())
    if kind == "ungroup":
        return {"out0_grad": [Message(_row_tag(tag, 0, 2), Direction.BWD, np.ones((1, width), np.int64))]}
    if kind == "group":
        return {"in0": [Message(_row_tag(tag, 3, 2), Direction.FWD, np.ones((1, width), np.int64))]}
    return {"in0": [Message(tag, Direction.FWD, np.ones((2, width), np.int64))],
            "in1": [Message(tag, Direction.FWD, np.array([[0, 1], [0, 5]]))]}


def _simulate(harness: tuple[Graph, Path], run_dir: Path, benches: dict[str, dict]) -> dict[str, dict]:
    """Runs ``amp_hls.sim.rows_tb`` once with every kernel's stimulus; the bench's record per node."""
    (run_dir / "stim.json").write_text(json.dumps({"benches": benches}))
    env = {"AMP_SIM_STIMULUS": str(run_dir / "stim.json"), "AMP_SIM_RESULT": str(run_dir / "result.json")}
    runner.run(harness[1], HARNESS, "amp_hls.sim.rows_tb", run_dir / "sim", env)
    return json.loads((run_dir / "result.json").read_text())


@pytest.fixture(scope="session")
def checked(harness: tuple[Graph, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[dict[str, dict], dict[str, Golden]]:
    """Every kernel under random stalls, all in one simulation: what each sent, what numpy wants."""
    g = harness[0]
    runs = {node: _stimulus(g, node, "check", N, seed=sum(map(ord, node))) for node in NODES}
    results = _simulate(harness, tmp_path_factory.mktemp("rows_check"), {n: r[0] for n, r in runs.items()})
    return results, {n: r[1] for n, r in runs.items()}


@pytest.fixture(scope="session")
def timed(harness: tuple[Graph, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], dict[str, dict]]:
    """Every kernel with back-to-back instances of random sizes, no stalls: the bench's record and
    the stimulus."""
    g = harness[0]
    benches = {node: _stimulus(g, node, "cycles", SLOTS, seed=3)[0] for node in NODES}
    return _simulate(harness, tmp_path_factory.mktemp("rows_cycles"), benches), benches


@pytest.mark.parametrize("node", NODES)
def test_rows_bit_exact(node: str, checked: tuple[dict[str, dict], dict[str, Golden]]) -> None:
    result, want = checked[0][node], checked[1][node].out
    if node.startswith("aggregate"):  # the case covers saturating sums both ways
        assert checked[1][node].saturated.keys() == {f"{node}.fwd", f"{node}.bwd"}
    assert not result["failure"], f"{node}: {result['failure']}"
    assert result["error"] == 0, f"{node} raised amp_error"
    assert result["extra"] == 0, f"{node} sent more messages than expected"
    assert result["peak_used"] == SLOTS, f"{node}: the tag table never filled up"
    assert result["out"].keys() == want.keys()
    for port, msgs in want.items():
        got = result["out"][port]
        assert len(got) == len(msgs), f"{node} {port}: {len(got)} messages out, numpy {len(msgs)}"
        by_tag = {_tag(d): d["payload"] for d in got}
        assert len(by_tag) == len(got), f"{node} {port}: a tag came out twice"
        for m in msgs:
            assert m.tag in by_tag, f"{node} {port}: no message for {m.tag}"
            assert by_tag[m.tag] == m.payload.tolist(), f"{node} {port} {m.tag}: RTL {by_tag[m.tag]} != numpy {m.payload.tolist()}"
    if node.startswith("ungroup"):  # rows leave in order, parents in arrival order
        assert [_tag(d) for d in result["out"]["out0"]] == [m.tag for m in want["out0"]]


@pytest.mark.parametrize("node", NODES)
def test_rows_cycle_model(node: str, harness: tuple[Graph, Path], timed: tuple[dict[str, dict], dict[str, dict]]) -> None:
    """The model prices each message by its own port and rows, as the cycle report does; summed
    over the instances' messages (forward inputs and gradients) it must match the RTL's cycles."""
    g = harness[0]
    result, stim = timed[0][node], timed[1][node]
    assert not result["failure"] and result["error"] == 0 and result["extra"] == 0
    options = DeviceOptions(cache_slots=SLOTS)
    sent = [(port, len(d["payload"])) for port, docs in stim["inputs"].items() for d in docs]
    sent += [("out0_grad", len(d["payload"])) for d in stim["grads"]]
    model = sum(message_cycles(g, node, options, port, rows) for port, rows in sent) / SLOTS
    measured = sum(result["cycles"].values()) / SLOTS
    print(f"{node}: measured {measured:.1f} cycles/instance, model {model:.1f} "
          f"(forward {result['cycles']['fwd'] / SLOTS:.1f}, backward {result['cycles']['bwd'] / SLOTS:.1f})")
    assert abs(model - measured) <= 0.15 * measured, f"{node}: model {model:.1f} vs RTL {measured:.1f}"


@pytest.mark.parametrize("node", NODES)
def test_rows_bad_input(node: str, harness: tuple[Graph, Path],
                        checked: tuple[dict[str, dict], dict[str, Golden]]) -> None:
    """Malformed input the numpy kernel refuses raises amp_error and sends nothing."""
    g = harness[0]
    kernel = KERNELS[g.nodes[node].kind](g.nodes[node], g, FIXED)
    with pytest.raises(KernelError):
        for port, msgs in _bad(g.nodes[node].kind, node[-1]).items():
            for m in msgs:
                if port == "out0_grad":
                    kernel.backward(0, [m])
                else:
                    kernel.forward(int(port[2:]), [m])
    assert checked[0][node]["bad"] == {"error": 1, "sent": 0, "taken": True}
