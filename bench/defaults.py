"""Candidate defaults for a model: epochs and CPU seconds to its target per (mak, muf), over seeds.

One run of the staleness grid (``bench.staleness``) cannot tell a better setting from a lucky
seed; this trains each candidate on several seeds, stopping at the target or the epoch cap.

    python -m bench.defaults list-rnn --cells 16:16 32:16 64:64 --seeds 0 1 2 --epochs 8

Prints one line per cell and writes bench/results/defaults_<model>.json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS, ModelSpec
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.report import write_json
from amp_hls.runtime.trainer import TrainConfig, Trainer
from bench.run import RESULTS, fit, machine, single_threaded


def parse_cell(text: str) -> tuple[int, int]:
    """``MAK:MUF`` -> (mak, muf)."""
    try:
        mak, muf = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a cell is MAK:MUF, e.g. 16:8, got {text!r}") from None
    if mak < 1 or muf < 1:
        raise argparse.ArgumentTypeError(f"mak and muf must be at least 1, got {text!r}")
    return mak, muf


def run(entry: ModelSpec, mak: int, muf: int, seed: int, epochs: int) -> dict[str, Any]:
    """One seed of one cell, to the model's target or the cap."""
    config = TrainConfig(mak=mak, muf=muf, optimizer=OptimizerConfig("adam", lr=entry.defaults.get("lr", 1e-3)),
                         epochs=epochs, seed=seed, target=entry.target)
    trainer = Trainer(entry, config, entry.data(seed))
    _, cpu = fit(trainer, None)
    summary = trainer.summary()
    if not summary["conservation_ok"]:
        raise AmpHlsError(f"{entry.name} mak {mak} muf {muf} seed {seed}: {summary['conservation_problems']}")
    hit = next((i for i, r in enumerate(trainer.history) if entry.better(r.val_metric, entry.target)), None)
    return {
        "seed": seed,
        "epoch_to_target": None if hit is None else hit + 1,
        "cpu_time_to_target_s": None if hit is None else cpu[hit],
        "test_metric": summary["test_metric"],
        "cpu_instances_per_s": trainer.instances / cpu[-1] if cpu[-1] > 0 else None,
    }


def describe(mak: int, muf: int, runs: Sequence[dict[str, Any]]) -> str:
    def one(r: dict[str, Any]) -> str:
        if r["epoch_to_target"] is None:
            return f"seed {r['seed']}: missed (test {r['test_metric']:.4f})"
        return f"seed {r['seed']}: epoch {r['epoch_to_target']}, {r['cpu_time_to_target_s']:.1f} CPU s"
    speed = [r["cpu_instances_per_s"] for r in runs if r["cpu_instances_per_s"]]
    mean = f"{sum(speed) / len(speed):,.0f} inst/s" if speed else "-"
    return f"mak {mak:>3} muf {muf:>3}  {mean:>13}  " + "; ".join(one(r) for r in runs)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.defaults", description=__doc__.splitlines()[0])
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--cells", nargs="+", type=parse_cell, required=True, metavar="MAK:MUF")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=10, help="epoch cap per run (default 10)")
    p.add_argument("--out", default=None, help="JSON path (default bench/results/defaults_<model>.json)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    entry = MODELS[args.model]
    cells = []
    with single_threaded(torch_too=False):
        for mak, muf in args.cells:
            runs = [run(entry, mak, muf, seed, args.epochs) for seed in args.seeds]
            print(f"{args.model} {describe(mak, muf, runs)}", flush=True)
            cells.append({"mak": mak, "muf": muf, "runs": runs})
    out = args.out or RESULTS / f"defaults_{args.model}.json"
    write_json({"machine": machine(), "model": args.model, "target": entry.target,
                "metric": entry.metric, "epochs": args.epochs, "cells": cells}, out)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
