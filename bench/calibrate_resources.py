"""Fit the resource model's coefficients (amp_hls/cycles/resource_coefficients.json) to Yosys.

Synthesises a grid of small kernels of every device kind (zoo nodes, and a small ungroup/group
graph for the kind no zoo model puts on the device) at a few cache sizes and parallelisms, the
boundary's k_demux / k_mux / amp_control of two designs, and amp_fifo at three depths, each with
``amp_hls.codegen.estimate`` (``synth_xilinx``, cached by the RTL's hash: a rerun synthesises only
what changed). Then, per kind and resource, a bounded non-negative least-squares fit of the measured
counts on the model's features (``amp_hls.cycles.resources.USES``), each sample weighted by its
size (relative error), under both memory placements (by cost, or all distributed): the better
is kept. Rerun it whenever the RTL templates or hw/rtl change::

    python -m bench.calibrate_resources            # all kinds, writes the coefficient file
    python -m bench.calibrate_resources --kinds linear activation   # refit some, keep the rest

A kind whose synthesis fails (a template mid-edit) keeps its previous row, and is named.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from amp_hls.codegen import rtl
from amp_hls.codegen.estimate import Estimate, estimate
from amp_hls.cycles import resources as rm
from amp_hls.design import DeviceDesign, DeviceOptions, build_design
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph, GraphCore, graph_from_json
from amp_hls.models import MODELS
from amp_hls.models.tree_rnn import build_tree_rnn
from amp_hls.resources import hw_dir, templates_dir

WORK = Path("build/calibrate_resources")
FAMILY = "xc7"  # pynq-z2's; UltraScale+ (zcu104) is priced with the same rows (docs/board.md)
Features = dict[str, float]


def group_graph(width: int = 8, rows: int = 6) -> GraphCore:
    """Ungroup then group (no zoo model puts a group on the device)."""
    g = Graph(f"cal_group_{width}")
    x = g.source("x", width=width, max_rows=rows)
    y = g.group(g.ungroup(x, name="ug"), rows, name="grp")
    g.loss(y, g.source("t", width=width, max_rows=rows), "mse")
    return g.validate()  # type: ignore[return-value]


def device_loss(model: str) -> GraphCore:
    """A zoo model's graph with its loss on the device (no zoo model places it there)."""
    doc = MODELS[model].build().to_json()
    for node in doc["nodes"]:
        if node["kind"] == "loss":
            node["placement"] = "device"
    return graph_from_json(doc)


GRAPHS: dict[str, Callable[[], GraphCore]] = {
    **{name: entry.build for name, entry in MODELS.items()},
    # tree-rnn's samples were synthesised with its leaf routers on the device: a 12-input phi
    # (words), and embed with its dx (the zoo runs both on the host, where embed has none)
    "tree-rnn": lambda: build_tree_rnn(routers="device"),
    "cal-group-8": lambda: group_graph(8, 6), "cal-group-20": lambda: group_graph(20, 4),
    "mlp-loss": lambda: device_loss("mlp"), "qm9-loss": lambda: device_loss("ggsnn-qm9"),
}


@dataclass(frozen=True)
class Point:
    """One kernel to synthesise: a node of a graph at a cache size (and parallelism)."""

    graph: str
    node: str
    slots: int
    parallelism: int | None = None
    lanes: int | None = None  # a row-wise kernel's (wire.py, Lanes)

    @property
    def label(self) -> str:
        return (f"{self.graph}:{self.node}@{self.slots}" + (f"/P{self.parallelism}" if self.parallelism else "")
                + (f"/L{self.lanes}" if self.lanes else ""))


def laned(*points: Point) -> list[Point]:
    """Each point again at 2 and 4 lanes."""
    return [dataclasses.replace(p, lanes=lanes) for p in points for lanes in (2, 4)]


B15 = "ggsnn-babi15"
GRID: dict[str, list[Point]] = {
    "linear": [Point("mlp", "head", 4, 1), Point("mlp", "head", 16, 1), Point("mlp", "head", 4, 4),
               Point("mlp", "head", 16, 8), Point("mlp", "fc0", 4, 16), Point("list-rnn", "rnn", 8, 2),
               Point(B15, "prop_gates", 4, 4), Point(B15, "embed", 32, 1),
               Point("mlp", "fc0", 4, 13), Point("mlp", "head", 4, 6),  # unaligned: element shifters
               Point("mlp", "head", 4, 64), Point("tree-rnn", "embed", 4, 128)],  # 2 and 4 rows of W a step
    "activation": [Point("mlp", "act0", 4), Point("mlp", "act0", 16), Point(B15, "prop_gates_act", 4),
                   *laned(Point("mlp", "act0", 4))],
    "phi": [Point("list-rnn", "h", 4), Point("list-rnn", "h", 16), Point(B15, "prop_e0", 4), Point("tree-rnn", "words", 4)],
    "aggregate": [Point(B15, "prop_agg0", 4), Point(B15, "prop_agg0", 16), Point("ggsnn-qm9", "prop_agg0", 4),
                  *laned(Point(B15, "prop_agg0", 4))],
    "broadcast": [Point(B15, "prop_h_fan0", 4), Point(B15, "prop_h_fan0", 16), Point(B15, "prop_e0_fan0", 4),
                  Point(B15, "prop_msg_fan0", 4), *laned(Point(B15, "prop_h_fan0", 4))],
    "concat": [Point(B15, "prop_msgs", 4), Point(B15, "prop_msgs", 16), Point("list-rnn", "step_in", 4),
               *laned(Point(B15, "prop_msgs", 4))],
    "split": [Point(B15, "prop_zfr", 4), Point(B15, "prop_zfr", 16), Point(B15, "readout_split", 4),
              *laned(Point(B15, "prop_zfr", 4))],
    "mul": [Point(B15, "prop_reset", 4), Point(B15, "prop_reset", 16), Point("ggsnn-qm9", "prop_reset", 4),
            *laned(Point(B15, "prop_reset", 4))],
    "add": [Point(B15, "prop_update", 4), Point(B15, "prop_update", 16), Point("ggsnn-qm9", "prop_update", 4),
            *laned(Point(B15, "prop_update", 4))],
    "isu": [Point("list-rnn", "advance", 4), Point("list-rnn", "advance", 16), Point("tree-rnn", "climb", 4)],
    "cond": [Point("list-rnn", "more", 4), Point("list-rnn", "more", 16), Point("tree-rnn", "side", 4)],
    "rowsum": [Point(B15, "readout_sum", 4), Point(B15, "readout_sum", 16), Point("ggsnn-qm9", "readout_sum", 4),
               *laned(Point(B15, "readout_sum", 4))],
    "ungroup": [Point("list-rnn", "elements", 4), Point("list-rnn", "elements", 16), Point("cal-group-8", "ug", 4),
                *laned(Point("cal-group-20", "ug", 4))],
    "group": [Point("cal-group-8", "grp", 4), Point("cal-group-8", "grp", 16), Point("cal-group-20", "grp", 4),
              *laned(Point("cal-group-20", "grp", 4))],
    "loss": [Point("mlp-loss", "xent", 4), Point("mlp-loss", "xent", 16), Point("mlp-loss", "xent", 64),
             Point("qm9-loss", "loss", 4)],
}
BOUNDARY_DESIGNS = (("mlp", 4), (B15, 4))  # k_demux / k_mux / amp_control of these
FIFO_BITS = (4, 8, 11)
CONVERTER_LANES = ((2, 4), (4, 4), (8, 16))  # (L, BPR) of the amp_widen / amp_narrow samples


def design_of(graph: str, slots: int, parallelism: dict[str, int] | None = None,
              lanes: dict[str, int] | None = None) -> DeviceDesign:
    g = GRAPHS[graph]()
    for name, p in (parallelism or {}).items():
        g.nodes[name].parallelism = p  # type: ignore[attr-defined]
    for name, n in (lanes or {}).items():
        g.nodes[name].lanes = n  # type: ignore[attr-defined]
    return build_design(g, DeviceOptions(cache_slots=slots))


def _library(text: str) -> list[str]:
    """The hand-written modules a text instantiates (hw/rtl), besides rtl.LIBRARY_FILES."""
    extra = [p.name for p in sorted((hw_dir() / "rtl").glob("*.sv")) if p.stem in text and p.name not in rtl.LIBRARY_FILES]
    return [*rtl.LIBRARY_FILES, *extra]


def _write(folder: Path, files: dict[str, str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        (folder / name).write_text(text)
        paths.append(folder / name)
    return paths


def synth_kernel(design: DeviceDesign, node: str, cache: Path | None = None) -> Estimate:
    """Yosys' count of one kernel module, synthesised on its own (package and library with it)."""
    text = rtl.render_kernel(design, node)
    files = {rtl.PACKAGE_FILE: rtl.options_package(design.options)}
    files |= {name: (hw_dir() / "rtl" / name).read_text() for name in _library(text)}
    files[f"k_{node}.sv"] = text
    folder = WORK / hashlib.sha256("".join(files.values()).encode()).hexdigest()[:16]
    return estimate(_write(folder, files), f"k_{node}", FAMILY, cache=cache)


def synth_boundary(design: DeviceDesign, top: str, cache: Path | None = None) -> Estimate:
    text = rtl.render_boundary(design)
    files = {rtl.PACKAGE_FILE: rtl.options_package(design.options)}
    files |= {name: (hw_dir() / "rtl" / name).read_text() for name in _library(text)}
    files[rtl.BOUNDARY_FILE] = text
    folder = WORK / hashlib.sha256("".join(files.values()).encode()).hexdigest()[:16]
    return estimate(_write(folder, files), top, FAMILY, cache=cache)


def synth_fifo(bits: int, cache: Path | None = None) -> Estimate:
    ports = ["ap_clk", "ap_rst_n", "s_TDATA", "s_TVALID", "s_TREADY", "s_TLAST", "m_TDATA", "m_TVALID", "m_TREADY", "m_TLAST"]
    decl = ("input wire ap_clk, input wire ap_rst_n, input wire [63:0] s_TDATA, input wire s_TVALID, "
            "output wire s_TREADY, input wire s_TLAST, output wire [63:0] m_TDATA, output wire m_TVALID, "
            "input wire m_TREADY, output wire m_TLAST")
    wrapper = (f"module cal_fifo_{bits} ({decl});\n  amp_fifo #(.AW({bits})) u ("
               + ", ".join(f".{p}({p})" for p in ports) + ");\nendmodule\n")
    files = {rtl.PACKAGE_FILE: rtl.render_package(DeviceOptions().numerics),  # amp_ram reads its memory rule there
             **{name: (hw_dir() / "rtl" / name).read_text() for name in (rtl.FIFO_FILE, "amp_ram.sv")},
             f"cal_fifo_{bits}.sv": wrapper}
    folder = WORK / hashlib.sha256("".join(files.values()).encode()).hexdigest()[:16]
    return estimate(_write(folder, files), f"cal_fifo_{bits}", FAMILY, cache=cache)


def synth_converter(part: str, lanes: int, bpr: int, cache: Path | None = None) -> Estimate:
    """One amp_widen or amp_narrow (hw/rtl/amp_lanes.sv) of ``lanes`` beats, rows of ``bpr``."""
    wide, narrow = f"[{64 * lanes - 1}:0]", "[63:0]"
    s_bits, m_bits = (narrow, wide) if part == "widen" else (wide, narrow)
    ports = ["ap_clk", "ap_rst_n", "s_TDATA", "s_TVALID", "s_TREADY", "s_TLAST", "m_TDATA", "m_TVALID", "m_TREADY", "m_TLAST"]
    decl = (f"input wire ap_clk, input wire ap_rst_n, input wire {s_bits} s_TDATA, input wire s_TVALID, "
            f"output wire s_TREADY, input wire s_TLAST, output wire {m_bits} m_TDATA, output wire m_TVALID, "
            "input wire m_TREADY, output wire m_TLAST")
    top = f"cal_{part}_{lanes}"
    wrapper = (f"module {top} ({decl});\n  amp_{part} #(.L({lanes}), .BPR({bpr})) u ("
               + ", ".join(f".{p}({p})" for p in ports) + ");\nendmodule\n")
    files = {"amp_lanes.sv": (hw_dir() / "rtl" / "amp_lanes.sv").read_text(), f"{top}.sv": wrapper}
    folder = WORK / hashlib.sha256("".join(files.values()).encode()).hexdigest()[:16]
    return estimate(_write(folder, files), top, FAMILY, cache=cache)


def measured(est: Estimate) -> dict[str, float]:
    return {**{r: est.resources[r] for r in ("lut", "ff", "dsp", "bram36")}, "lutram": float(est.lutram)}


@dataclass
class Sample:
    label: str
    features: dict[str, Features]  # placement -> features
    measured: dict[str, float]
    seconds: float


Recorded = dict[str, dict[str, float]]  # a sample's label -> the Yosys counts the coefficient file recorded


def _count(label: str, synth: Callable[[], Estimate], recorded: Recorded | None) -> tuple[dict[str, float], float, str]:
    """The Yosys counts of one sample: synthesised (cached), or as ``recorded`` (a refit)."""
    if recorded is None:
        est = synth()
        return measured(est), est.seconds, "cached" if est.cached else f"{est.seconds:.0f} s"
    if label not in recorded:
        raise AmpHlsError(f"--refit: the coefficient file records no Yosys counts for {label}: rerun without --refit")
    return {r: float(v) for r, v in recorded[label].items()}, 0.0, "recorded"


def kernel_samples(kind: str, log: Callable[[str], None], cache: Path | None = None,
                   recorded: Recorded | None = None) -> list[Sample]:
    out = []
    for point in GRID[kind]:
        fixed = {point.node: point.parallelism} if point.parallelism else None
        design = design_of(point.graph, point.slots, fixed, {point.node: point.lanes} if point.lanes else None)
        kernel = design.nodes[point.node]
        if kernel.node.kind != kind:
            raise AmpHlsError(f"calibration grid: {point.label} is a {kernel.node.kind}, not a {kind}")
        counts, seconds, how = _count(point.label, lambda d=design, n=point.node: synth_kernel(d, n, cache), recorded)
        feats = {p: rm.kernel_features(design, point.node, p) for p in rm.PLACEMENTS}
        out.append(Sample(point.label, feats, counts, seconds))
        log(f"  {point.label}: {_show(counts)} ({how})")
    return out


def boundary_samples(part: str, log: Callable[[str], None], cache: Path | None = None,
                     recorded: Recorded | None = None) -> list[Sample]:
    out = []
    if part == "fifo":
        for bits in FIFO_BITS:
            label = f"amp_fifo AW={bits}"
            counts, seconds, _ = _count(label, lambda b=bits: synth_fifo(b, cache), recorded)
            out.append(Sample(label, {p: rm.fifo_features(bits) for p in rm.PLACEMENTS}, counts, seconds))
            log(f"  {label}: {_show(counts)}")
        return out
    if part in ("widen", "narrow"):
        for lanes, bpr in CONVERTER_LANES:
            label = f"amp_{part} L={lanes} BPR={bpr}"
            counts, seconds, _ = _count(label, lambda n=lanes, b=bpr: synth_converter(part, n, b, cache), recorded)
            out.append(Sample(label, {p: rm.boundary_features(wide=lanes - 1) for p in rm.PLACEMENTS}, counts, seconds))
            log(f"  {label}: {_show(counts)}")
        return out
    top = {"demux": "k_demux", "mux": "k_mux", "control": "amp_control"}[part]
    for graph, slots in BOUNDARY_DESIGNS:
        design = design_of(graph, slots)
        routes = {"demux": len(design.wiring.demux_routes), "mux": len(design.wiring.mux_routes),
                  "control": len(design.device_nodes)}[part]
        label = f"{graph}:{top}"
        counts, seconds, _ = _count(label, lambda d=design: synth_boundary(d, top, cache), recorded)
        out.append(Sample(label, {p: rm.boundary_features(routes) for p in rm.PLACEMENTS}, counts, seconds))
        log(f"  {label} ({routes} routes): {_show(counts)}")
    return out


def _show(r: dict[str, float]) -> str:
    return ", ".join(f"{rm.LABELS[k]} {v:,.0f}" if float(v).is_integer() else f"{rm.LABELS[k]} {v:,.1f}" for k, v in r.items())


PARSIMONY = 0.02  # relative error a feature must buy to be kept: collinear features (a grid of a
# few points, where tag-table columns and memory bits grow together) would otherwise share a resource
# unphysically, and a model that drops when a memory moves to block RAM is not monotone


# physical ceilings of a coefficient: a kilobit of LUT-RAM is 16-22 LUTs (RAM32M/RAM64M: 192 bits in
# 4 LUTs, plus read muxes), so a fit must not explain tag-table logic by memory bits (collinear on
# a small grid)
CEILINGS = {("lut", "kbits"): 32.0, ("lutram", "kbits"): 32.0}


ERROR_FLOOR = 10.0  # relative errors are taken against at least this count (the near-zero ones)


def fit_resource(samples: list[Sample], placement: str, r: str) -> dict[str, float]:
    """Non-negative least squares on relative error over the subset of ``USES[r]`` (the constant
    always in) that explains the samples best for its size: its coefficients."""
    names = rm.USES[r]
    a_all = np.array([[s.features[placement][f] for f in names] for s in samples])
    y = np.array([rm.fitted_count(s.measured, r) for s in samples])
    w = 1.0 / np.maximum(y, ERROR_FLOOR)
    best: tuple[float, dict[str, float]] | None = None
    for size in range(1, len(names) + 1):
        for subset in itertools.combinations(range(len(names)), size):
            if names.index("one") not in subset and "one" in names:
                continue
            a = a_all[:, subset]
            upper = [CEILINGS.get((r, names[i]), np.inf) for i in subset]
            x = lsq_linear(a * w[:, None], y * w, bounds=(0.0, upper)).x
            score = float(np.mean(np.abs(a @ x - y) * w)) + PARSIMONY * size
            if best is None or score < best[0] - 1e-12:
                coefficients = dict.fromkeys(names, 0.0)
                coefficients.update({names[i]: round(float(v), 6) for i, v in zip(subset, x)})
                best = (score, coefficients)
    assert best is not None
    if r == "bram36" and not a_all[:, names.index("bram")].any():  # no point of the grid holds a
        best[1]["bram"] = 1.0  # memory in block RAM: the cost rule's count stands
    return best[1]


def fit(samples: list[Sample], placements: tuple[str, ...] = rm.PLACEMENTS) -> tuple[rm.Row, float]:
    """The row (and its mean relative error over LUT, FF and BRAM36) of the better placement."""
    best: tuple[rm.Row, float] | None = None
    for placement in placements:
        coefficients = {r: fit_resource(samples, placement, r) for r in rm.RESOURCES}
        row = rm.Row(coefficients, placement)
        priced = [row.price(s.features[placement]) for s in samples]
        score = float(np.mean([abs(getattr(p, r) - s.measured[r]) / max(s.measured[r], ERROR_FLOOR)  # the total LUT
                               for r in ("lut", "ff", "bram36") for p, s in zip(priced, samples)]))
        if best is None or score < best[1] - 1e-9:
            best = (row, score)
    assert best is not None
    return best


UNSAMPLED = ("top.sv.j2", "harness.sv.j2", "board.v.j2")  # amp_top, the test harness and the board
# wrapper: no sample synthesises them (amp_top's streams are priced as FIFOs and converters)


def rtl_key(root: Path | None = None) -> str:
    """A hash of the RTL templates and hw/rtl the samples synthesise: which RTL the coefficients
    were fitted to (``root``: another checkout's, to compare)."""
    templates, hw = (templates_dir(), hw_dir()) if root is None else (root / "templates", root / "hw")
    h = hashlib.sha256()
    for path in sorted([*(templates / "rtl").rglob("*.j2"), *(hw / "rtl").glob("*.sv")], key=lambda p: p.name):
        if path.name not in UNSAMPLED:
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="+", help="refit only these kinds / boundary parts (default: all)")
    ap.add_argument("--out", type=Path, default=rm.COEFFICIENTS_FILE)
    ap.add_argument("--refit", action="store_true",
                    help="synthesise nothing: fit again on the Yosys counts the coefficient file recorded "
                         "(only while it was fitted on today's RTL; for a change of the model's features or fit)")
    args = ap.parse_args(argv)
    every = [*rm.priced_kinds(), *rm.BOUNDARY]
    wanted = args.kinds or every
    unknown = sorted(set(wanted) - set(every))
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(every)}")
    missing = sorted(set(rm.priced_kinds()) - set(GRID))
    if missing:
        raise SystemExit(f"the calibration grid has no point for kind(s) {', '.join(missing)}: add some to GRID")
    old = json.loads(args.out.read_text()) if args.out.is_file() else {}
    doc: dict[str, Any] = {"schema": rm.COEFFICIENTS_SCHEMA, "family": FAMILY, "kinds": dict(old.get("kinds", {})),
                           "boundary": dict(old.get("boundary", {})), "fit": dict(old.get("fit", {})),
                           "rtl": "partial", "calibrated": old.get("calibrated", "partial")}  # until the end
    recorded: Recorded | None = None
    if args.refit:
        if old.get("rtl") != rtl_key():
            raise SystemExit(f"--refit: {args.out} was fitted on RTL {old.get('rtl')!r}, today's is {rtl_key()}: "
                             "its Yosys counts are not today's; rerun without --refit")
        recorded = {s["point"]: s["yosys"] for f in old.get("fit", {}).values() for s in f.get("samples", [])}
    start = time.time()
    failed = []
    for name in wanted:
        print(f"{name}:", flush=True)
        try:
            samples = (kernel_samples(name, print, recorded=recorded) if name in GRID
                       else boundary_samples(name, print, recorded=recorded))
        except AmpHlsError as exc:
            failed.append(name)
            print(f"  FAILED, keeping the previous row: {str(exc).splitlines()[0]}", flush=True)
            continue
        row, score = fit(samples)
        (doc["kinds"] if name in GRID else doc["boundary"])[name] = rm.row_to_json(row)
        doc["fit"][name] = {"placement": row.placement, "mean_relative_error": round(score, 4),
                            "samples": [{"point": s.label, "yosys": s.measured,
                                         "model": row.price(s.features[row.placement]).to_json()} for s in samples]}
        now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        if recorded is None:
            doc["fit"][name]["calibrated"] = now
        else:  # the counts are the earlier synthesis's
            doc["fit"][name] |= {"calibrated": old["fit"][name].get("calibrated", "unknown"), "refitted": now}
        print(f"  fit ({row.placement}): mean relative error {score:.1%}", flush=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")  # an interrupted run keeps what it refitted
    doc["rtl"] = rtl_key() if not failed and set(wanted) == set(every) else "partial"
    if recorded is None:
        doc["calibrated"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    else:
        doc["refitted"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    doc["failed"] = failed
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} in {time.time() - start:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    try:
        rm.coefficients_from_json(doc)
    except AmpHlsError as exc:  # incomplete: the model cannot load it
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
