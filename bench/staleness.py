"""Staleness study: how mak (instances in flight) and muf (gradients per update) trade speed for
convergence in amp-hls async training.

For every cell of mak x muf it trains the model for a fixed number of epochs (no early stop, so
the final metric is comparable across cells), from the same data, seed and initial weights, and
records the final validation/test metric, the time-to-target (end of the first epoch whose
validation metric reaches the model's target), instances/s and the measured staleness: parameter
versions elapsed between an instance's forward and its backward at each Linear, averaged over
every gradient message.

    python -m bench.staleness --quick     # smoke test: subsets, 2 epochs (a few minutes)
    python -m bench.staleness             # the full grid (list-rnn, ggsnn-qm9; tens of minutes)

Writes bench/results/staleness.json (``--quick``: staleness_quick.json) and a heatmap per model,
bench/results/staleness_<model>.png (``--quick``: staleness_quick_<model>.png).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS, ModelSpec
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.report import write_json
from amp_hls.runtime.trainer import TrainConfig, Trainer
from bench.run import RESULTS, fit, machine, mean_staleness, single_threaded

MAKS = (1, 4, 16, 64)
MUFS = (1, 4, 16)
MODELS_STUDIED = ("list-rnn", "ggsnn-qm9")


@dataclass(frozen=True)
class StalenessPlan:
    name: str  # names the output files
    epochs: Mapping[str, int]
    train_subset: Mapping[str, int | None]  # first n training instances (None: all)
    budget_s: float | None  # a cell stops after the epoch whose training time passes this


PLANS = {
    "quick": StalenessPlan("staleness_quick", {"list-rnn": 2, "ggsnn-qm9": 2},
                           {"list-rnn": 1500, "ggsnn-qm9": 700}, budget_s=None),
    "full": StalenessPlan("staleness", {"list-rnn": 8, "ggsnn-qm9": 10},
                          {"list-rnn": None, "ggsnn-qm9": None}, budget_s=150.0),
}


def cell_config(entry: ModelSpec, mak: int, muf: int, epochs: int, seed: int) -> TrainConfig:
    """The model's defaults but ``mak`` / ``muf``; no target, so every cell runs every epoch."""
    return TrainConfig(mak=mak, muf=muf, optimizer=OptimizerConfig("adam", lr=entry.defaults.get("lr", 1e-3)),
                       epochs=epochs, seed=seed, target=None)


def run_cell(entry: ModelSpec, splits: Splits, mak: int, muf: int, epochs: int, seed: int,
             budget_s: float | None) -> dict[str, Any]:
    trainer = Trainer(entry, cell_config(entry, mak, muf, epochs, seed), splits)
    stopped, cpu = fit(trainer, budget_s)  # no target in the config: only the budget stops it early
    s = trainer.summary()
    if not s["conservation_ok"]:
        raise AmpHlsError(f"{entry.name} mak {mak} muf {muf}: conservation failed: {s['conservation_problems']}")
    hit = [i for i, r in enumerate(trainer.history) if entry.better(r.val_metric, entry.target)]
    reached = trainer.history[hit[0]] if hit else None
    stale = s["staleness"]
    return {
        "mak": mak, "muf": muf,
        "epochs": s["epochs"],
        "final_val_metric": trainer.history[-1].val_metric,
        "best_val_metric": (min if entry.metric == "mae" else max)(r.val_metric for r in trainer.history),
        "test_metric": s["test_metric"],
        "time_to_target_s": reached.wall_s if reached else None,
        "epoch_to_target": reached.epoch if reached else None,  # EpochRecord.epoch counts from 1
        "cpu_time_to_target_s": cpu[hit[0]] if hit else None,
        "train_s": s["wall_s"],
        "train_cpu_s": cpu[-1],
        "stopped_by_budget": stopped,
        "instances_per_s": s["instances_per_s"],
        "cpu_instances_per_s": s["instances"] / cpu[-1] if cpu[-1] > 0 else None,
        "mean_staleness": mean_staleness(s),
        "max_staleness": max((v["max"] for v in stale.values()), default=0),
        "staleness_per_node": {k: round(v["mean"], 3) for k, v in stale.items()},
        "updates": sum(trainer.optimizer.steps.values()),  # node updates, all nodes together
        "updates_per_node": dict(trainer.optimizer.steps),
        "curve": [[r.wall_s, r.val_metric] for r in trainer.history],
    }


def subset(splits: Splits, n: int | None) -> Splits:
    return splits if n is None else replace(splits, train=splits.train[:n])


def study(name: str, plan: StalenessPlan, maks: Sequence[int], mufs: Sequence[int], seed: int) -> dict[str, Any]:
    entry = MODELS[name]
    splits = subset(entry.data(seed), plan.train_subset.get(name))
    cells = []
    for mak in maks:
        for muf in mufs:
            cell = run_cell(entry, splits, mak, muf, plan.epochs[name], seed, plan.budget_s)
            ttt = cell["time_to_target_s"]
            reached = f"{ttt:.1f} s (epoch {cell['epoch_to_target']})" if ttt is not None else "not reached"
            print(f"  {name} mak {mak:>2} muf {muf:>2}: {cell['epochs']} epochs {cell['train_s']:6.1f} s "
                  f"({cell['train_cpu_s']:.1f} s CPU) {cell['instances_per_s']:6.0f} inst/s  final val {entry.metric} {cell['final_val_metric']:.4f}  "
                  f"target {reached}  "
                  f"staleness {cell['mean_staleness']:.2f} (max {cell['max_staleness']})",
                  file=sys.stderr, flush=True)
            cells.append(cell)
    return {"dataset": splits.name, "train_instances": len(splits.train), "metric": entry.metric,
            "metric_unit": entry.metric_unit, "target": entry.target, "epochs": plan.epochs[name],
            "budget_s": plan.budget_s, "lr": entry.defaults.get("lr", 1e-3), "seed": seed, "cells": cells}


def table(name: str, result: Mapping[str, Any]) -> str:
    unit = f" {result['metric_unit']}" if result["metric_unit"] else ""
    lines = [f"{name}: {result['train_instances']} training instances, {result['epochs']} epochs, "
             f"target val {result['metric']} {result['target']:g}{unit}",
             f"  {'mak':>4} {'muf':>4} {'final val':>10} {'test':>8} {'time-to-target':>16} "
             f"{'CPU s':>6} {'inst/s':>7} {'CPU i/s':>7} {'staleness':>10} {'updates':>8}"]
    for c in result["cells"]:
        ttt = (f"{c['time_to_target_s']:.1f} s (ep {c['epoch_to_target']})"
               if c["time_to_target_s"] is not None else "not reached")
        cpu = c["cpu_time_to_target_s"]
        lines.append(f"  {c['mak']:>4} {c['muf']:>4} {c['final_val_metric']:>10.4f} {c['test_metric']:>8.4f} "
                     f"{ttt:>16} {f'{cpu:.1f}' if cpu is not None else '-':>6} {c['instances_per_s']:>7.0f} "
                     f"{c['cpu_instances_per_s']:>7.0f} {c['mean_staleness']:>10.2f} {c['updates']:>8}")
    return "\n".join(lines)


def plot(name: str, result: Mapping[str, Any], path: Path) -> None:
    """Three heatmaps over mak x muf: final validation metric, CPU time to target, mean staleness."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    maks = sorted({c["mak"] for c in result["cells"]})
    mufs = sorted({c["muf"] for c in result["cells"]})
    at = {(c["mak"], c["muf"]): c for c in result["cells"]}
    metric = result["metric"]
    panels = [("final_val_metric", f"final val {metric}" + (f" ({result['metric_unit']})" if result["metric_unit"] else ""),
               "viridis" if metric == "accuracy" else "viridis_r"),
              ("cpu_time_to_target_s", f"CPU s to target {result['target']:g}", "magma_r"),
              ("mean_staleness", "mean staleness (versions)", "cividis")]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, (key, title, cmap) in zip(axes, panels):
        grid = np.array([[at[(m, u)][key] if (m, u) in at and at[(m, u)][key] is not None else np.nan
                          for u in mufs] for m in maks], dtype=float)
        colours = plt.get_cmap(cmap).copy()
        colours.set_bad("lightgrey")  # a cell that missed the target
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=colours, aspect="auto")
        for i in range(len(maks)):
            for j in range(len(mufs)):
                v = grid[i, j]
                ax.text(j, i, "missed" if np.isnan(v) else (f"{v:.3f}" if key == "final_val_metric" else f"{v:.2f}" if key == "mean_staleness" else f"{v:.1f}"),
                        ha="center", va="center", color="dimgrey" if np.isnan(v) else "black", fontsize=9,
                        bbox={"facecolor": "white", "alpha": 0.6, "linewidth": 0} if not np.isnan(v) else None)
        ax.set_xticks(range(len(mufs)), [str(u) for u in mufs])
        ax.set_yticks(range(len(maks)), [str(m) for m in maks])
        ax.set_xlabel("muf (gradients per update)")
        ax.set_ylabel("mak (instances in flight)")
        ax.set_title(title, fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"{name}: amp-hls async, {result['epochs']} epochs, {result['train_instances']} training instances")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.staleness", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke test: training subsets, 2 epochs")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS_STUDIED))
    p.add_argument("--mak", nargs="+", type=int, default=list(MAKS))
    p.add_argument("--muf", nargs="+", type=int, default=list(MUFS))
    p.add_argument("--epochs", type=int, help="override every model's epoch count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="JSON to write (default bench/results/staleness[_quick].json)")
    p.add_argument("--no-plot", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = PLANS["quick" if args.quick else "full"]
    if args.epochs is not None:
        plan = replace(plan, epochs={m: args.epochs for m in MODELS})
    epochs = {m: plan.epochs.get(m, MODELS[m].defaults.get("epochs", 10)) for m in args.models}
    plan = replace(plan, epochs=epochs)
    out = args.out if args.out is not None else RESULTS / f"{plan.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    try:
        with single_threaded(torch_too=False):
            for name in args.models:
                result = study(name, plan, args.mak, args.muf, args.seed)
                print(table(name, result), flush=True)
                doc.setdefault("models", {})[name] = result
                doc["machine"] = machine()
                write_json(doc, out)  # after every model, so a long run keeps what it finished
                if not args.no_plot:
                    plot(name, result, out.parent / f"{plan.name}_{name}.png")
    except AmpHlsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
