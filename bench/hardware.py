"""The folded hardware per zoo model and board: what folding chooses, what the models predict,
what the RTL simulation measures, and the numpy CPU runtime beside it.

    python -m bench.hardware --quick      # mlp and list-rnn, rtlsim on mlp/pynq-z2 only (minutes)
    python -m bench.hardware              # the zoo, rtlsim on each model's pynq-z2 design
    python -m bench.hardware --testbench  # ... and each folded design through the cocotb testbench

For each model and board the model is folded (``amp_hls.api.fold_for``) at the model's training
mak, sized by the cache rule; when that does not fit the board (the resource model), mak is
lowered to the most that fit (``api.fitting_options``, as ``amp-hls generate --board`` does). The
JSON holds the chosen parallelism and muf, the predicted instances/s (cycle model, latency
priced: ``report.Pace``), the resource model's totals against the board, the DSPs used against
the board's and the fraction of the DSP peak the useful MACs reach. Where measured, the folded
project is generated and a stream of instances runs through its RTL under Verilator, as many in
flight as the tag caches hold by the sizing rule (``report.safe_in_flight``), so the model's error
is on a run that cannot lose a message; the error of the busiest-kernel model alone (no latency)
is recorded beside it, and the same stream measured once more with the host streaming (answering
each output at once, as it does polling the board, instead of running each turn to idle). With ``--testbench`` each model's folded design on every board it
fits also goes through ``amp-hls testbench``'s check (cocotb + Verilator, random
stalls on host_in and host_out, bit-exact against the numpy device model): pass or fail, its
cycles, its wall time. The numpy CPU runtime trains the same model's instances in the same process
(one epoch, the model's defaults): the ratio is the device's instances/s (predicted, and measured
at the board's clock) over the CPU's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amp_hls import api
from amp_hls.codegen.boards import load_board
from amp_hls.codegen.project import open_project
from amp_hls.cycles.folding import FitError, Folding, apply
from amp_hls.cycles.linear import format_shares
from amp_hls.cycles.report import cycle_report, measure_rtlsim, safe_in_flight, sample_inputs
from amp_hls.cycles.resources import load_coefficients, shown_resources
from amp_hls.datasets import Splits
from amp_hls.design import DeviceOptions, build_design
from amp_hls.host.rtlsim import RtlsimBuildError
from amp_hls.host.settings import generation_options
from amp_hls.models import MODELS
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig, Trainer
from bench.calibrate_resources import rtl_key

OUT = Path("bench/results/hardware.json")
WORK = Path("build/bench_hardware")
BOARDS = ("pynq-z2", "zcu104")
MODELS_FULL = ("mlp", "list-rnn", "tree-rnn", "ggsnn-qm9")
QUICK = {"models": ("mlp", "list-rnn"), "measure": {("mlp", "pynq-z2")}, "instances": 256, "cpu_instances": 256}
FULL = {"models": MODELS_FULL, "measure": {(m, b) for m in MODELS_FULL for b in BOARDS},  # every fold that fits
        "instances": 256, "cpu_instances": 256}  # 256: several GRADS dumps at muf 64 and mak 16
# fewer for a model whose design simulates slowly: ggsnn-qm9's zcu104 fold runs ~5k cycles/s on
# rtlsim, 128 graphs (13 batches at mak 10) take 7 minutes a measurement
RTLSIM_INSTANCES = {"ggsnn-qm9": 128}


TESTBENCH_INSTANCES = 8  # per model through the cocotb bench (random stalls: slow per cycle)
TESTBENCH_STALL = 0.3  # the fraction of cycles host_in / host_out stall (project_bench.check's default)


def fold_fitting(model: str, board: str) -> tuple[Folding, DeviceOptions, int | None]:
    """The folding at the model's mak, or at a lower one that fits (``api.fold_fitting``), and
    the mak it was lowered from (FitError when not even one instance in flight fits)."""
    spec = MODELS[model]
    graph = spec.build()
    mak = int(spec.defaults.get("mak", 16))
    options = generation_options(spec, graph, DeviceOptions(), muf_given=False, cache_given=False, mak=mak)
    folding, options = api.fold_fitting(spec, board, options)  # as `amp-hls generate --board` does
    return folding, options, folding.mak_lowered_from


def cpu_rate(model: str, instances: int) -> dict[str, Any]:
    """The numpy runtime training one epoch of ``instances`` with the model's defaults, in the
    device's fixed point (the computation the device does, bit for bit)."""
    spec = MODELS[model]
    full = spec.data(0)
    splits = Splits(full.name, full.train[:instances], full.val[:1], full.test[:1])
    d = spec.defaults
    config = TrainConfig(mak=d.get("mak", 16), muf=d.get("muf", 8), epochs=1, seed=0, target=None, numerics="fixed",
                         optimizer=OptimizerConfig("adam", lr=d.get("lr", 1e-3)))
    trainer = Trainer(spec, config, splits)
    cpu = time.process_time()
    trainer.fit()
    cpu = time.process_time() - cpu
    s = trainer.summary()
    return {"instances": s["instances"], "instances_per_s": s["instances_per_s"],
            "cpu_instances_per_s": s["instances"] / cpu if cpu > 0 else None, "numerics": config.numerics}


def measure(model: str, board: str, folding: Folding, options: DeviceOptions, instances: int) -> dict[str, Any]:
    """The folded project's RTL under Verilator, at most the sizing rule's instances in flight."""
    spec = MODELS[model]
    root = WORK / f"{model}-{board}"
    api.generate(spec, root, board=board, options=options, force=True, folding=folding)
    graph = apply(spec.build(), folding)
    inputs = sample_inputs(graph, instances, 0, spec)
    mak = min(instances, safe_in_flight(build_design(graph, options).placement, inputs, options.cache_slots))
    start = time.perf_counter()
    m = measure_rtlsim(root, inputs, mak)
    streamed = measure_rtlsim(root, inputs, mak, streaming=True)  # the host answering each output at once
    report = cycle_report(open_project(root).design, load_board(board), inputs)  # priced at the run's mak
    model_cycles = report.cycles_per_instance
    kernels = max(max(folding.cycles.values()), folding.link_beats)  # the model before latency was priced
    return {"instances": m.instances, "mak": m.mak, "cycles": m.cycles, "cycles_per_instance": m.cycles_per_instance,
            "instances_per_s": folding.clock_mhz * 1e6 / m.cycles_per_instance,
            "model_cycles_per_instance": model_cycles, "model_bound": report.pace.bound(),
            "model_error": model_cycles / m.cycles_per_instance - 1.0,  # >0: the model is pessimistic
            "kernel_model_cycles_per_instance": kernels,
            "kernel_model_error": kernels / m.cycles_per_instance - 1.0,
            "round_trip_cycles": report.pace.round_trip,
            "streaming_cycles_per_instance": streamed.cycles_per_instance,
            "streaming_instances_per_s": folding.clock_mhz * 1e6 / streamed.cycles_per_instance,
            "sim_s": m.sim_seconds + streamed.sim_seconds, "wall_s": time.perf_counter() - start}


def testbench(model: str, board: str, folding: Folding, options: DeviceOptions) -> dict[str, Any]:
    """The folded design through ``amp-hls testbench``'s check: cocotb + Verilator, random stalls,
    every DATA message and GRADS dump against the numpy device model, at the design's mak."""
    from amp_hls.sim.project_bench import check

    spec = MODELS[model]
    root = (WORK / f"{model}-{board}-tb").resolve()  # the simulator runs the bench from its own directory
    api.generate(spec, root, board=board, options=options, force=True, folding=folding)
    mak = options.max_in_flight or 1
    api.testbench(root, model=spec, instances=TESTBENCH_INSTANCES, mak=[mak])  # root/tb, as `pytest root/tb` runs it
    instances = sample_inputs(apply(spec.build(), folding), TESTBENCH_INSTANCES, 0, spec)
    start = time.perf_counter()
    try:
        r = check(root, instances, mak, root / "tb" / "run", root / "tb" / "build", stall=TESTBENCH_STALL)
    except Exception as exc:  # noqa: BLE001 -- a failed build or bench is a result to record
        return {"passed": False, "mak": mak, "error": f"{type(exc).__name__}: {exc}"[:2000],
                "wall_s": time.perf_counter() - start}
    return {"passed": not r.problems and r.messages > 0, "mak": mak, "instances": len(instances),
            "stall": TESTBENCH_STALL, "messages": r.messages, "grads_dumps": r.grads_dumps, "cycles": r.cycles,
            "cycles_per_instance": r.cycles / len(instances), "problems": r.problems[:20],
            "sim_s": r.seconds, "wall_s": time.perf_counter() - start}


def bench_one(model: str, board_name: str, instances: int, rtlsim: bool, tb: bool = False) -> dict[str, Any]:
    """What folding chooses for ``model`` on the board and what it predicts; ``{"fits": False,
    "why": ...}`` when no mak fits (the misfit message names the resource and the kernels)."""
    board = load_board(board_name)
    try:
        folding, options, lowered = fold_fitting(model, board_name)
    except FitError as exc:
        return {"fits": False, "why": str(exc)}
    spec = MODELS[model]
    graph = apply(spec.build(), folding)
    design = build_design(graph, dataclasses.replace(options, muf=folding.muf))
    report = cycle_report(design, board, sample_inputs(graph, instances, 0, spec))
    total = folding.resources.total
    doc: dict[str, Any] = {
        "fits": True, "mak": options.max_in_flight, "cache_slots": options.cache_slots, "mak_lowered_from": lowered,
        "mak_limit": folding.mak_limit, "lutram_depth": folding.lutram_depth,
        "parallelism": folding.parallelism, "lanes": folding.lanes, "muf": folding.muf, "bound": folding.bound,
        "bottleneck": folding.bottleneck, "predicted_instances_per_s": folding.instances_per_s,
        "round_trip_cycles": folding.pace.round_trip, "pace_bound": folding.pace.bound(),
        "macs": folding.dsps, "dsps": total.dsp, "board_dsps": board.resources["dsp"],
        "dsp_fraction_of_board": total.dsp / board.resources["dsp"],
        "dsp_peak": report.dsp_peak, "board_dsp_peak": report.board_dsp_peak,
        # each Linear's cycles per instance by part (MAC steps, payload read, GRADS dumps, the rest)
        "linear_parts": {n.name: dict(n.parts) for n in report.nodes if n.parts},
        "resources": folding.to_json()["resources"],
    }
    try:
        doc["rtlsim"] = measure(model, board_name, folding, options, instances) if rtlsim else None
    except RtlsimBuildError as exc:  # a build past its timeout (a loaded machine) is a result too
        doc["rtlsim"] = {"error": str(exc)}
    doc["testbench"] = testbench(model, board_name, folding, options) if tb else None
    return doc


def run(models: Sequence[str], boards: Sequence[str], measured: set[tuple[str, str]], instances: int,
        cpu_instances: int, out: Path, tb: bool = False) -> dict[str, Any]:
    coefficients = load_coefficients()
    doc: dict[str, Any] = {"coefficients": {k: coefficients.meta.get(k) for k in ("calibrated", "rtl", "family")},
                           "rtl_now": rtl_key(), "models": {}}
    doc["coefficients_match_rtl"] = doc["coefficients"]["rtl"] == doc["rtl_now"]
    for model in models:
        cpu = cpu_rate(model, cpu_instances)
        entry: dict[str, Any] = {"cpu": cpu, "boards": {}}
        for board in boards:
            t = time.perf_counter()
            b = bench_one(model, board, RTLSIM_INSTANCES.get(model, instances), (model, board) in measured, tb)
            if not b["fits"]:
                entry["boards"][board] = b
                print(f"{model} on {board}: does not fit at mak 1: {b['why']}", flush=True)
                continue
            b["ratio_predicted_vs_cpu"] = b["predicted_instances_per_s"] / cpu["instances_per_s"]
            b["ratio_rtlsim_vs_cpu"] = (b["rtlsim"]["instances_per_s"] / cpu["instances_per_s"]) \
        if b["rtlsim"] and "error" not in b["rtlsim"] else None
            b["bench_s"] = time.perf_counter() - t
            entry["boards"][board] = b
            print(summary(model, board, b, cpu), flush=True)
        doc["models"][model] = entry
        out.parent.mkdir(parents=True, exist_ok=True)  # written after each model: a long run keeps what it has
        out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    print(f"wrote {out}")
    return doc


def summary(model: str, board: str, b: dict[str, Any], cpu: dict[str, Any]) -> str:
    par = ", ".join(f"{n}={p}" for n, p in b["parallelism"].items())
    if b.get("lanes"):
        par += "; lanes " + ", ".join(f"{n}={k}" for n, k in b["lanes"].items())
    total, have = b["resources"]["total"], b["resources"]["board"]
    use = ", ".join(f"{r} {total[r]:,.0f}/{have[r]:,}" for r in shown_resources(total.get("uram", 0), have))
    line = (f"{model} on {board} (mak {b['mak']}, {b['cache_slots']} slots): {par}, muf {b['muf']} -> "
            f"{b['predicted_instances_per_s']:,.0f} instances/s predicted, {b['ratio_predicted_vs_cpu']:.1f}x the "
            f"numpy CPU runtime ({cpu['instances_per_s']:,.0f}/s); {use}; bound: {b['bound']}")
    parts = b.get("linear_parts", {}).get(b["bottleneck"])
    if parts:  # where the bottleneck Linear's time goes (cycles.linear.PARTS)
        line += (f"\n  {b['bottleneck']}'s cycles: {format_shares(parts)}; "
                 f"DSP-bound peak {b['dsp_peak']:.0%} of the instantiated MACs")
    if b["rtlsim"] and "error" in b["rtlsim"]:
        line += f"\n  rtlsim: not measured: {b['rtlsim']['error']}"
    elif b["rtlsim"]:
        r = b["rtlsim"]
        line += (f"\n  rtlsim: {r['cycles_per_instance']:,.1f} cycles/instance at {r['mak']} in flight -> "
                 f"{r['instances_per_s']:,.0f}/s ({b['ratio_rtlsim_vs_cpu']:.1f}x CPU); model {r['model_error']:+.1%} "
                 f"(busiest kernel alone {r['kernel_model_error']:+.1%}); {r['model_bound']}")
        if "streaming_cycles_per_instance" in r:
            line += (f"\n  rtlsim, streaming host: {r['streaming_cycles_per_instance']:,.1f} cycles/instance -> "
                     f"{r['streaming_instances_per_s']:,.0f}/s")
    if b.get("testbench"):
        t = b["testbench"]
        line += (f"\n  testbench (cocotb, stalls): {'pass' if t['passed'] else 'FAIL'} at mak {t['mak']}, "
                 f"{t.get('cycles', 0):,} cycles, {t['wall_s']:.0f} s" + (f": {t['error'][:300]}" if "error" in t else ""))
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="mlp and list-rnn, rtlsim on mlp/pynq-z2 only")
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS))
    ap.add_argument("--boards", nargs="+", default=list(BOARDS))
    ap.add_argument("--no-rtlsim", action="store_true", help="predict only")
    ap.add_argument("--testbench", action="store_true",
                    help="each model's folded design on every board it fits through the cocotb testbench")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    models = args.models or plan["models"]
    measured = set() if args.no_rtlsim else plan["measure"]
    run(models, args.boards, measured, plan["instances"], plan["cpu_instances"], args.out,  # type: ignore[arg-type]
        tb=args.testbench)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
