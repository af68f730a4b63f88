"""The RTL testbench of a generated project (it sits above the generators and the host devices,
since it runs both): ``amp_top`` under Verilator and cocotb, checked bit
for bit against the numpy device model (``host.cpu.CpuDevice``).

``write_testbench(project)`` (``amp-hls testbench PROJECT``) writes ``PROJECT/tb/``: the cocotb
bench ``amp_top_tb.py`` (``templates/testbench``; the host nodes run inside the simulator and talk
to amp_top through host_in/host_out with random stalls), the instances it runs
(``instances.json``: a model's examples, ``amp-hls testbench PROJECT --model FILE``) and
``test_amp_top.py``, so that ``pytest PROJECT/tb`` builds ``PROJECT/rtl`` and runs it. Everything the bench needs is here or in
the installed package: the AXI-stream drivers and the Verilator runner are ``amp_hls.sim``.

``check(...)`` is the whole comparison: the same instances, weights and mak through the numpy
device model and through amp_top. Per boundary channel, every DATA message must match the
model's message of the same tag (instances in flight interleave differently on the two devices,
so the order across tags may differ), GRADS dumps must agree in number, tags and total (the
weights stay fixed during a run), and the host must end with nothing held (conservation).
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.jinja import environment
from ..codegen.project import open_project, project_rtl
from ..cycles.report import safe_in_flight
from ..design import DeviceOptions
from ..errors import AmpHlsError
from ..host.cpu import CpuDevice
from ..host.device import Device
from ..host.runner import HostRunner
from ..ir import GraphCore, Loss, Source
from ..kernels import ParamKernel
from ..message import Direction, Tag
from ..models import MODELS, Inputs, ModelSpec
from ..placement import Placement
from ..resources import templates_dir
from ..runtime import Engine
from ..runtime.check import sample_instances
from ..runtime.traffic import messages_per_instance
from ..wire import Kind, WireMessage
from .runner import RtlTestFailure, build, run

TB_DIR = "tb"
BENCH = "amp_top_tb"  # the cocotb module (templates/testbench/amp_top_tb.py)
TEST_FILE = "test_amp_top.py"
INSTANCES_FILE = "instances.json"  # what the bench feeds amp_top, written with it
WEIGHTS_VERSION = 1


# --- the project and its instances ---------------------------------------------------------------


def rtl_sources(root: Path) -> tuple[str, list[Path]]:
    """The top and the sources, in compile order, of the RTL that ``amp-hls generate`` wrote."""
    sources, top, _ = project_rtl(root)  # a manifest without RTL, or a corrupt one: AmpHlsError
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise AmpHlsError(f"the project in {root} lacks {', '.join(missing)}: regenerate it")
    return top, sources


def project_setup(root: Path, weights_seed: int | None) -> tuple[Placement, DeviceOptions, dict[str, dict[str, np.ndarray]]]:
    """The project's placement and options, and the float weights of its device Linear nodes
    (drawn as ``Engine(graph, seed=weights_seed)`` draws them; none when the seed is None)."""
    project = open_project(root)
    graph = project.placement.graph
    weights: dict[str, dict[str, np.ndarray]] = {}
    if weights_seed is not None:
        engine = Engine(graph, project.options.numerics, seed=weights_seed)
        weights = {n: k.params for n, k in engine.kernels.items()
                   if isinstance(k, ParamKernel) and n in project.placement.device_nodes}
    return project.placement, project.options, weights


def zoo_instances(graph: GraphCore, n: int, seed: int) -> list[Inputs] | None:
    """``n`` training examples of the zoo model whose graph ``graph`` is (at any parallelism: a
    folded design is still the model), or None."""
    doc = _unfolded(graph.to_json())
    for entry in MODELS.values():
        model = entry.build()
        if _unfolded(model.to_json()) == doc:
            return [entry.inputs(e) for e in entry.data(seed).train[:n]]
    return None


def _unfolded(doc: dict) -> dict:
    """A graph document without its Linears' parallelism, which folding chooses."""
    nodes = [{**n, "attrs": {k: v for k, v in n.get("attrs", {}).items() if k != "parallelism"}}
             for n in doc["nodes"]]
    return {**doc, "nodes": nodes}


def random_instances(graph: GraphCore, n: int, seed: int) -> list[Inputs]:
    """Random instances for a graph outside the zoo: data sources uniform in [-4, 4), class
    labels for softmax_ce targets, every tag state empty. Control flow that reads the state, or
    other index inputs, needs instances of its own: that is an AmpHlsError."""
    rng = np.random.default_rng(seed)
    labels = {}
    for node in graph.nodes.values():
        if isinstance(node, Loss) and node.fn == "softmax_ce":
            labels[graph.edge_into(node.name, 1).src.node] = graph.input_spec(node.name, 0).width
    sources = [node for node in graph.nodes.values() if isinstance(node, Source)]
    for s in sources:
        if s.dtype == "index" and s.name not in labels:
            raise AmpHlsError(f"cannot invent instances for index source '{s.name}' of graph {graph.name!r}")
    out = []
    for _ in range(n):
        rows = int(rng.integers(1, min(s.max_rows for s in sources) + 1))
        inputs: Inputs = {}
        for s in sources:
            r = min(rows, s.max_rows)
            payload = (rng.integers(0, labels[s.name], (r, 1)) if s.name in labels
                       else rng.uniform(-4.0, 4.0, (r, s.width)))
            inputs[s.name] = ((), payload)
        out.append(inputs)
    return out


def instances_for(graph: GraphCore, n: int, seed: int, model: ModelSpec | None = None) -> list[Inputs]:
    """``n`` instances of ``model`` (checked against ``graph``), else of the zoo model that is
    ``graph``, else random ones (graphs without control flow)."""
    if model is not None:
        return sample_instances(model, graph, n, seed)
    return zoo_instances(graph, n, seed) or random_instances(graph, n, seed)


def encode_instances(instances: Sequence[Inputs]) -> list[dict[str, Any]]:
    """Instances as JSON (floats round-trip exactly)."""
    return [{name: {"state": list(state), "payload": np.asarray(p).tolist(), "index": np.asarray(p).dtype.kind in "iu"}
             for name, (state, p) in inputs.items()} for inputs in instances]


def decode_instances(docs: list[dict[str, Any]]) -> list[Inputs]:
    return [{name: (tuple(d["state"]), np.array(d["payload"], dtype=np.int64 if d["index"] else np.float64))
             for name, d in doc.items()} for doc in docs]


def message_doc(msg: WireMessage) -> dict[str, Any]:
    return {"channel": msg.channel, "kind": int(msg.kind), "direction": int(msg.direction),
            "key": msg.tag.key, "state": list(msg.tag.state), "payload": msg.payload.tolist()}


def doc_message(doc: dict[str, Any]) -> WireMessage:
    return WireMessage(doc["channel"], Kind(doc["kind"]), Direction(doc["direction"]),
                       Tag(doc["key"], tuple(doc["state"])), np.array(doc["payload"], dtype=np.int64))


# --- Verilator through cocotb's Python runner (amp_hls.sim.runner builds) -----------------------


def simulate(build_dir: Path, top: str, bench_dir: Path, stimulus: dict[str, Any], work_dir: Path,
             timeout_us: float = 200_000, test: str = "amp_top_bench") -> dict[str, Any]:
    """Run one cocotb ``test`` of the bench in ``bench_dir`` on a build; what it recorded. A
    failing bench raises."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "stimulus.json").write_text(json.dumps(stimulus))
    env = {"AMP_TB_STIMULUS": str(work_dir / "stimulus.json"), "AMP_TB_RESULT": str(work_dir / "result.json"),
           "AMP_TB_TIMEOUT_US": str(timeout_us)}
    try:
        results = run(build_dir, top, BENCH, work_dir, env, seed=stimulus["seed"], testcase=test, path=[bench_dir])
        recorded = (work_dir / "result.json").is_file()
    except RtlTestFailure as exc:
        results, recorded = exc.results, False
    if not recorded:
        raise AmpHlsError(f"the cocotb bench of {top} failed: see the simulator's log above ({results})")
    return json.loads((work_dir / "result.json").read_text())


# --- the check ------------------------------------------------------------------------------------


def _bench_dir(root: Path) -> Path:
    """The bench as ``write_testbench`` left it in ``root/tb``, or else the packaged one."""
    return root / TB_DIR if (root / TB_DIR / f"{BENCH}.py").is_file() else templates_dir() / "testbench"


@dataclass
class TbReport:
    problems: list[str] = field(default_factory=list)
    received: list[WireMessage] = field(default_factory=list)  # from host_out, in order
    grads_dumps: int = 0
    weights_loads: int = 0  # WEIGHTS messages sent (GRADS dumps name the version they used)
    cycles: int = 0  # simulated, from reset to the last message
    seconds: float = 0.0  # wall time of the simulation

    @property
    def messages(self) -> int:
        return len(self.received)


class CaptureDevice(Device):
    """Records what the host hands a device (the weights to put on host_in)."""

    name = "capture"

    def __init__(self, placement: Placement):
        super().__init__(placement)
        self.sent: list[WireMessage] = []

    def send(self, msgs: Sequence[WireMessage]) -> None:
        self.sent += msgs

    def recv(self, timeout: float = 1.0) -> list[WireMessage]:
        return []

    def reset(self) -> None:
        self.sent = []


def reference(placement: Placement, options: DeviceOptions, weights: dict[str, dict[str, np.ndarray]],
              instances: Sequence[Inputs], mak: int, seed: int) -> tuple[list[WireMessage], CpuDevice]:
    """What the numpy device model sends back for these instances, and the model."""
    cpu = CpuDevice(placement, options.numerics, muf=options.muf)
    runner = HostRunner(placement, cpu, options.numerics, seed=seed)
    if weights:
        runner.send_weights(weights, version=WEIGHTS_VERSION)
    runner.run(instances, mak=mak)
    problems = runner.host.conservation_report() + cpu.engine.conservation_report()
    if problems:
        raise AmpHlsError(f"the numpy device model itself lost messages: {problems}")
    return runner.received, cpu


def compare(want: Sequence[WireMessage], got: Sequence[WireMessage], placement: Placement,
            cpu: CpuDevice, muf: int) -> list[str]:
    """Where ``got`` (amp_top) differs from ``want`` (the numpy device model)."""
    def by_channel(msgs: Sequence[WireMessage]) -> dict[tuple[int, Kind, Direction], list[WireMessage]]:
        out: dict[tuple[int, Kind, Direction], list[WireMessage]] = defaultdict(list)
        for m in msgs:
            out[(m.channel, m.kind, m.direction)].append(m)
        return out

    expected, actual = by_channel(want), by_channel(got)
    problems = []
    for key in sorted(set(expected) | set(actual)):
        where = f"{placement.channel(key[0]).name} {key[1].name} {key[2].name}"
        a, b = expected.get(key, []), actual.get(key, [])
        if len(a) != len(b):
            problems.append(f"{where}: {len(b)} messages from amp_top, {len(a)} from the numpy model")
            continue
        if key[1] is Kind.GRADS:
            node = placement.channel(key[0]).node
            if [m.tag for m in a] != [m.tag for m in b]:
                problems.append(f"{where}: dump tags {[m.tag for m in b]} != {[m.tag for m in a]}")
            # a dump's content depends on which backward messages it gathered; the total does not
            # (unless gradients are left in the accumulators, which depend on the interleaving)
            if cpu.engine.counts[node].bwd_in % muf == 0 and not np.array_equal(sum(m.payload for m in a), sum(m.payload for m in b)):
                problems.append(f"{where}: the dumps' total differs from the numpy model's")
            continue
        order = lambda m: (m.tag.key, m.tag.state)  # noqa: E731
        for x, y in zip(sorted(a, key=order), sorted(b, key=order)):
            if x != y:
                problems.append(f"{where} tag {x.tag}: amp_top sent {y.tag} {y.payload.tolist()}, "
                                f"the numpy model {x.payload.tolist()}")
    return problems


def check(root: str | Path, instances: Sequence[Inputs], mak: int, work_dir: Path, cache_dir: Path,
          seed: int = 0, stall: float = 0.3, batch: int = 4, weights_seed: int | None = 11,
          idle_cycles: int = 200_000) -> TbReport:
    """Run ``instances`` through the project's amp_top and through the numpy device model (the
    bench in ``root/tb``, or the packaged one). The bench fails
    when amp_top sends nothing for ``idle_cycles`` while instances are in flight."""
    root = Path(root)
    top, sources = rtl_sources(root)
    placement, options, weights = project_setup(root, weights_seed)
    want, cpu = reference(placement, options, weights, instances, mak, seed)
    build_dir = build(sources, top, cache_dir)
    stimulus = {"project": str(root.resolve()), "instances": encode_instances(instances), "mak": mak, "seed": seed,
                "stall": stall, "batch": batch, "weights_seed": weights_seed, "weights_version": WEIGHTS_VERSION,
                "expected_grads": cpu.counters.grads_dumps, "idle_cycles": idle_cycles}
    start = time.perf_counter()
    result = simulate(build_dir, top, _bench_dir(root), stimulus, work_dir)
    got = [doc_message(d) for d in result["received"]]
    report = TbReport(received=got, grads_dumps=sum(m.kind is Kind.GRADS for m in got),
                      weights_loads=cpu.counters.weights_loads, cycles=result["cycles"],
                      seconds=time.perf_counter() - start)
    report.problems = compare(want, got, placement, cpu, options.muf)
    report.problems += [f"host: {p}" for p in result["host_conservation"]]
    return report


def check_errors(root: str | Path, work_dir: Path, cache_dir: Path) -> dict[str, Any]:
    """amp_error before and after a partial host_in beat (``keep``) and a message for no channel
    (``channel``), each after a reset; the bench itself fails unless both are ``(0, 1)``."""
    root = Path(root)
    top, sources = rtl_sources(root)
    stimulus = {"project": str(root.resolve()), "seed": 0}
    return simulate(build(sources, top, cache_dir), top, _bench_dir(root), stimulus, work_dir,
                    test="amp_top_flags_bad_input")


# --- writing the testbench ------------------------------------------------------------------------


DEFAULT_MAK = (1, 3)  # a testbench's runs: one instance at a time, then several in flight


def write_testbench(root: str | Path, instances: int = 8, mak: Sequence[int] | None = None, seed: int = 0,
                    model: ModelSpec | None = None) -> list[Path]:
    """Write ``root/tb``: the cocotb bench, the instances it runs (``instances.json``: those of
    ``model``, else as ``instances_for`` finds them) and a pytest file (``pytest root/tb``).
    ``mak``: a run per entry; by default ``DEFAULT_MAK``, each lowered to what the project's tag
    caches hold for these instances (a design folded for mak 1 runs 1 only); a given one beyond
    that is refused, since the run would overrun a cache and stall."""
    root = Path(root)
    if instances < 1 or (mak is not None and min(mak, default=0) < 1):
        raise AmpHlsError("a testbench needs at least one instance and every mak at least 1")
    top, _ = rtl_sources(root)  # no RTL, no testbench: fails before anything is written
    project = open_project(root)
    graph = project.placement.graph
    slots = project.options.cache_slots
    inputs = instances_for(graph, instances, seed, model)  # a graph it cannot feed fails now
    most = safe_in_flight(project.placement, inputs, slots)  # the sizing rule the report keeps to
    if mak is None:
        mak = sorted({min(m, most) for m in DEFAULT_MAK})
    elif max(mak) > most:
        per = messages_per_instance(graph, project.placement.device_nodes, inputs)
        raise AmpHlsError(f"mak {max(mak)} is beyond what the project's {slots} cache slots hold for these "
                          f"instances ({per} messages an instance at one node: at most {most} in flight); "
                          f"keep every --mak within it, or regenerate with more --cache-slots")
    tb = root / TB_DIR
    tb.mkdir(exist_ok=True)
    bench = tb / f"{BENCH}.py"
    shutil.copyfile(templates_dir() / "testbench" / f"{BENCH}.py", bench)
    stimulus = tb / INSTANCES_FILE
    stimulus.write_text(json.dumps(encode_instances(inputs)) + "\n")
    test = tb / TEST_FILE
    test.write_text(environment().get_template(f"testbench/{TEST_FILE}.j2").render(
        graph_name=graph.name, top=top, instances=len(inputs), mak=list(mak), seed=seed,
        instances_file=INSTANCES_FILE))
    return [bench, stimulus, test]

