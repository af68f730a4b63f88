"""Instances/s of the native runtime against the numpy runtime, one epoch each, same process.

Both train the same model with its defaults (async, Adam, mak, muf) on the same data, seed and
shuffle; CPU time is the process's (robust to other load on a shared machine), wall time the
trainer's own ``train_s``. The numpy BLAS runs on one thread (threadpoolctl), as in bench/run.py.

    python -m bench.native                       # the zoo's benchmark models, float and fixed
    python -m bench.native --models mlp --epochs 3 --threads 2   # and native on 2 worker threads
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from amp_hls.models import MODELS
from amp_hls.native import NativeTrainer, unsupported_kinds
from amp_hls.runtime.report import write_json
from amp_hls.runtime.trainer import Trainer, TrainerBase
from bench.run import DEFAULT_MODELS, RESULTS, machine, single_threaded, train_config


def measure(model: str, numerics: str, epochs: int, threads: int | None) -> dict[str, Any]:
    """Both runtimes on ``model`` (and native on ``threads`` workers): instances/s by wall and by
    CPU time, and the native/numpy ratios."""
    spec = MODELS[model]
    splits = spec.splits(0)
    config = replace(train_config(spec, False, 0, epochs), numerics=numerics, target=None)
    runtimes: dict[str, Any] = {"numpy": Trainer, "native": NativeTrainer}
    if threads is not None:
        runtimes[f"native_{threads}_threads"] = lambda *a: NativeTrainer(*a, threads=threads)
    out: dict[str, Any] = {}
    for name, make in runtimes.items():
        trainer: TrainerBase = make(spec, config, splits)
        cpu = time.process_time()
        for _ in range(epochs):
            trainer.train_epoch()
        cpu = time.process_time() - cpu
        out[name] = {"instances_per_s": trainer.instances / trainer.train_s,
                     "cpu_instances_per_s": trainer.instances / cpu if cpu > 0 else None}
    n, p = out["native"], out["numpy"]
    out["native_vs_numpy_instances_per_s"] = n["instances_per_s"] / p["instances_per_s"]
    if n["cpu_instances_per_s"] and p["cpu_instances_per_s"]:
        out["native_vs_numpy_cpu_instances_per_s"] = n["cpu_instances_per_s"] / p["cpu_instances_per_s"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.native", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=sorted(MODELS))
    p.add_argument("--threads", type=int, help="also native on this many worker threads")
    p.add_argument("--numerics", nargs="+", default=["float", "fixed"], choices=["float", "fixed"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS / "native.json")
    args = p.parse_args(argv)
    results: dict[str, Any] = {}
    with single_threaded(torch_too=False):
        for model in args.models:
            missing = unsupported_kinds(MODELS[model].build())
            if missing:
                print(f"{model}: skipped, the native runtime has no {', '.join(missing)} kernel yet", file=sys.stderr)
                continue
            for numerics in args.numerics:
                r = measure(model, numerics, args.epochs, args.threads)
                results[f"{model}/{numerics}"] = r
                threaded = f"native_{args.threads}_threads"
                more = (f", {args.threads} threads {r[threaded]['instances_per_s']:.0f} inst/s"
                        if threaded in r else "")
                print(f"{model:<10} {numerics:<6} numpy {r['numpy']['instances_per_s']:>8.0f} inst/s, native "
                      f"{r['native']['instances_per_s']:>8.0f} inst/s: {r['native_vs_numpy_instances_per_s']:.1f}x "
                      f"(CPU time {r.get('native_vs_numpy_cpu_instances_per_s', float('nan')):.1f}x){more}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json({"machine": machine(), "epochs": args.epochs, "results": results}, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
