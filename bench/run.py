"""Async AMP vs the synchronous minibatch baseline: instances/s and time-to-target, as ratios.

Machines are shared and noisy, so absolute numbers mean little; every system is measured in the
same process, on the same data, seed and initial weights, and reported as a ratio to its peer.
Both systems use each model's defaults (Adam, the model's learning rate); the synchronous
baseline takes minibatches of ``mak`` instances, so only the update schedule differs.

    python -m bench.run --quick                 # < 5 minutes; writes bench/results/quick.json
    python -m bench.run --full                  # 3 seeds, higher epoch caps, medians
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS, ModelEntry
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.report import plot_curves, write_json
from amp_hls.runtime.trainer import TrainConfig, Trainer

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEMS: dict[str, bool] = {"amp_async": False, "amp_sync": True}  # name -> TrainConfig.sync
RATIOS = ("async_vs_sync_instances_per_s", "async_vs_sync_time_to_target")


@dataclass(frozen=True)
class Plan:
    """How much to run: ``name`` names the output files; ``epochs`` caps each model's runs."""

    name: str
    seeds: tuple[int, ...]
    epochs: Mapping[str, int]


# Quick caps keep the whole run under 5 minutes on 2 cores even when no system reaches its target
# (list-rnn: ~6.5 s per async epoch, ~3.5 s per sync epoch; mlp: ~0.2 s per epoch).
PLANS = {
    "quick": Plan("quick", (0,), {"mlp": 40, "list-rnn": 15}),
    "full": Plan("full", (0, 1, 2), {"mlp": 60, "list-rnn": 30}),
}


def train_config(entry: ModelEntry, sync: bool, seed: int, epochs: int) -> TrainConfig:
    """The model's defaults for both systems, so only the update schedule differs."""
    d = entry.defaults
    return TrainConfig(
        mak=d.get("mak", 16),
        muf=d.get("muf", 8),
        optimizer=OptimizerConfig("adam", lr=d.get("lr", 1e-3)),
        epochs=epochs,
        seed=seed,
        target=entry.target,
        sync=sync,
    )


def run_system(entry: ModelEntry, splits: Splits, sync: bool, seed: int, epochs: int) -> dict[str, Any]:
    """Train one system to the target or the cap; its numbers and validation curve."""
    trainer = Trainer(entry, train_config(entry, sync, seed, epochs), splits)
    trainer.fit()
    s = trainer.summary()
    if not s["conservation_ok"]:  # a run that lost messages measured something else
        raise AmpHlsError(f"{entry.name} conservation check failed: {s['conservation_problems']}")
    return {
        "seed": seed,
        "instances_per_s": s["instances_per_s"],
        "time_to_target_s": s["time_to_target_s"],
        "reached_target": s["reached_target"],
        "test_accuracy": s["test_accuracy"],
        "val_accuracy": s["val_accuracy"],
        "epochs": s["epochs"],
        "train_s": s["wall_s"],
        "curve": [[r.wall_s, r.val_metric] for r in trainer.history],
    }


def median_time(values: Sequence[float | None]) -> float | None:
    """Median time-to-target, a miss counting as infinitely slow; None when the median run missed."""
    m = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(m) else m


def summarise(runs: list[dict[str, Any]], config: TrainConfig) -> dict[str, Any]:
    """One system's medians over seeds (the single run's numbers when there is one seed)."""
    return {
        "instances_per_s": statistics.median(r["instances_per_s"] for r in runs),
        "time_to_target_s": median_time([r["time_to_target_s"] for r in runs]),
        "reached_target_runs": sum(r["reached_target"] for r in runs),
        "test_accuracy": statistics.median(r["test_accuracy"] for r in runs),
        "epochs": statistics.median(r["epochs"] for r in runs),
        "epoch_cap": config.epochs,
        "config": {"mode": "sync" if config.sync else "async", "mak": config.mak,
                   "muf": config.muf, "optimizer": config.optimizer.kind, "lr": config.optimizer.lr},
        "runs": runs,
    }


def ratios(systems: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """>1 means async is better: async/sync instances/s, sync/async time-to-target."""
    a, s = systems["amp_async"], systems["amp_sync"]
    ta, ts = a["time_to_target_s"], s["time_to_target_s"]
    return {
        RATIOS[0]: a["instances_per_s"] / s["instances_per_s"],
        RATIOS[1]: ts / ta if ta is not None and ts is not None else None,
    }


def bench_model(name: str, plan: Plan) -> dict[str, Any]:
    """Every system on every seed; the order alternates per seed so drift in machine load evens out."""
    entry = MODELS[name]
    cap = plan.epochs.get(name, entry.defaults.get("epochs", 10))  # a model the plan predates
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in SYSTEMS}
    dataset = ""
    for i, seed in enumerate(plan.seeds):
        splits = entry.data(seed)
        dataset = splits.name
        order = list(SYSTEMS) if i % 2 == 0 else list(reversed(SYSTEMS))
        for system in order:
            record = run_system(entry, splits, SYSTEMS[system], seed, cap)
            print(f"  {name} {system} seed {seed}: {record['epochs']} epochs, "
                  f"{record['train_s']:.1f} s, {record['instances_per_s']:.0f} inst/s", file=sys.stderr)
            runs[system].append(record)
    systems = {
        system: summarise(runs[system], train_config(entry, sync, plan.seeds[0], cap))
        for system, sync in SYSTEMS.items()
    }
    return {"dataset": dataset, "target": entry.target, "seeds": list(plan.seeds),
            "systems": systems, "ratios": ratios(systems)}


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "processor": platform.processor()}


def merge(doc: dict[str, Any], models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Replace only what this benchmark owns; other benchmarks' systems and ratios stay."""
    doc["machine"] = {**doc.get("machine", {}), **machine()}
    for name, result in models.items():
        model = doc.setdefault("models", {}).setdefault(name, {})
        model.update({k: v for k, v in result.items() if k not in ("systems", "ratios")})
        model.setdefault("systems", {}).update(result["systems"])
        model.setdefault("ratios", {}).update(result["ratios"])
    return doc


def _time(t: float | None, cap: int) -> str:
    return f"{t:.1f} s" if t is not None else f"not reached in {cap} epochs"


def _ratio(r: float | None) -> str:
    return f"{r:.2f}x" if r is not None else "n/a"


def report(name: str, result: Mapping[str, Any]) -> str:
    """A readable table of one model's systems and the async/sync ratios."""
    seeds = result["seeds"]
    lines = [f"{name} ({result['dataset']}): target val accuracy {result['target']:g}, "
             f"{'median of ' + str(len(seeds)) + ' seeds' if len(seeds) > 1 else f'seed {seeds[0]}'}",
             f"  {'system':<10} {'inst/s':>8} {'time-to-target':>24} {'test acc':>9} {'epochs':>7}"]
    for system, s in result["systems"].items():
        lines.append(f"  {system:<10} {s['instances_per_s']:>8.0f} "
                     f"{_time(s['time_to_target_s'], s['epoch_cap']):>24} "
                     f"{s['test_accuracy']:>9.4f} {s['epochs']:>7g}")
    r = result["ratios"]
    lines.append(f"  async/sync instances/s {_ratio(r[RATIOS[0]])}, "
                 f"sync/async time-to-target {_ratio(r[RATIOS[1]])}  (>1: async better)")
    missed = [f"{system} ({len(seeds) - s['reached_target_runs']} of {len(seeds)} runs)"
              for system, s in result["systems"].items() if s["reached_target_runs"] < len(seeds)]
    if missed:
        lines.append(f"  did not reach {result['target']:g} within the epoch cap: {', '.join(missed)}")
    return "\n".join(lines)


def plot(name: str, result: Mapping[str, Any], path: Path) -> None:
    """Validation accuracy against training wall time, one curve per system (and seed)."""
    curves = {}
    for system in SYSTEMS:
        for run in result["systems"][system]["runs"]:
            label = system if len(result["seeds"]) == 1 else f"{system} seed {run['seed']}"
            curves[label] = [tuple(p) for p in run["curve"]]
    plot_curves(curves, path, target=result["target"], title=f"{name}: async vs sync (amp-hls, CPU)")


def run(plan: Plan, models: Sequence[str], out: Path, plots: bool = True) -> dict[str, Any]:
    """Benchmark ``models``, print the tables, merge into ``out`` and plot beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in models:
        results[name] = bench_model(name, plan)
        print(report(name, results[name]), flush=True)
        if plots:
            plot(name, results[name], out.parent / f"{name}_{out.stem}.png")
    doc = json.loads(out.read_text()) if out.exists() else {}
    write_json(merge(doc, results), out)
    return results


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--quick", dest="plan", action="store_const", const="quick",
                      help="one seed, low epoch caps: under 5 minutes")
    size.add_argument("--full", dest="plan", action="store_const", const="full",
                      help="three seeds, higher epoch caps; reports medians")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["mlp", "list-rnn"],
                   help="models to benchmark (default: mlp list-rnn)")
    p.add_argument("--out", type=Path, help="JSON to merge into (default bench/results/<plan>.json)")
    p.add_argument("--epochs", type=int, help="override every model's epoch cap")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = PLANS[args.plan]
    if args.epochs is not None:
        plan = replace(plan, epochs={m: args.epochs for m in MODELS})
    out = args.out if args.out is not None else RESULTS / f"{plan.name}.json"
    start = time.perf_counter()
    try:
        run(plan, args.models, out, plots=not args.no_plot)
    except AmpHlsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
