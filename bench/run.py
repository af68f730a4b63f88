"""amp-hls async vs its synchronous baseline and PyTorch: instances/s and time-to-target, as ratios.

Machines are shared and noisy, so absolute numbers mean little; every system is measured in the
same process, on the same data, seed, shuffling order and initial weights, and reported as a
ratio to its peers. numpy's BLAS runs on one thread (threadpoolctl) and torch on one
(``torch.set_num_threads(1)``), except the ``_2t`` systems: the native runtime on two worker
threads and PyTorch batched on two intra-op threads. Each ratio takes each side's best thread
count (``best``); PyTorch eager stays on one (see ``THREADS``).

Systems (``SYSTEMS``): ``amp_async`` (the model's defaults: Adam, its learning rate, mak, muf),
``amp_sync`` (minibatches of ``mak`` run to completion, then every node updates), and, for models
with a PyTorch peer (``bench/torch_peers.py``, the ``bench`` extra), ``torch_eager`` (one instance
at a time, Python control flow) and ``torch_batched`` (padding/masking, level batching, disjoint
graph unions); ``amp_native_async`` and ``amp_native_sync`` are the same two modes on the native
runtime (``--backend native``, docs/native.md) for the models it runs, at 1 and 2 threads.

    python -m bench.run --quick                 # < 10 minutes; writes bench/results/quick.json
    python -m bench.run --full                  # 3 seeds, higher epoch caps, medians
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from amp_hls.datasets import Splits
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS, ModelSpec
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.report import plot_curves, write_json
from amp_hls.runtime.trainer import TrainConfig, Trainer, TrainerBase

RESULTS = Path(__file__).resolve().parent / "results"
# name -> (backend, mode): amp = the numpy runtime (mode: sync or async), native = the native
# runtime, torch = bench.torch_peers
SYSTEMS: dict[str, tuple[str, str]] = {
    "amp_async": ("amp", "async"),
    "amp_sync": ("amp", "sync"),
    "amp_native_async": ("native", "async"),
    "amp_native_sync": ("native", "sync"),
    "amp_native_async_2t": ("native", "async"),
    "amp_native_sync_2t": ("native", "sync"),
    "torch_eager": ("torch", "eager"),
    "torch_batched": ("torch", "batched"),
    "torch_batched_2t": ("torch", "batched"),
}
# Threads per system (1 unless named): the native runtime's worker threads, torch's intra-op
# threads. PyTorch eager gets no second: each of its ops is one instance's (a one-row product, a
# few thousand elements at most), too small for torch or its BLAS to split (not measured at 2).
THREADS = {"amp_native_async_2t": 2, "amp_native_sync_2t": 2, "torch_batched_2t": 2}
THREAD_SUFFIX = "_2t"  # the 2-thread twin of a system: ratios take the better of the two
AMP_SYSTEMS = ("amp_async", "amp_sync")
TORCH_SYSTEMS = ("torch_eager", "torch_batched")
TORCH_MODELS = ("list-rnn", "tree-rnn", "ggsnn-qm9", "ggsnn-babi15", "ggsnn-babi19")  # with a peer
RATIOS = ("async_vs_sync_instances_per_s", "async_vs_sync_time_to_target")
TORCH_RATIOS = {  # ratio key -> (torch system, measure)
    "speedup_vs_torch_eager": ("torch_eager", "time_to_target_s"),
    "speedup_vs_torch_batched": ("torch_batched", "time_to_target_s"),
    "instances_per_s_vs_torch_eager": ("torch_eager", "instances_per_s"),
    "instances_per_s_vs_torch_batched": ("torch_batched", "instances_per_s"),
}
NATIVE_RATIOS = {  # ratio key -> (peer system, measure): >1 means amp_native_async is better
    "native_vs_numpy_instances_per_s": ("amp_async", "instances_per_s"),
    "native_vs_numpy_time_to_target": ("amp_async", "time_to_target_s"),
    "native_async_vs_sync_instances_per_s": ("amp_native_sync", "instances_per_s"),
    "native_async_vs_sync_time_to_target": ("amp_native_sync", "time_to_target_s"),
    "native_async_2t_vs_sync_time_to_target": ("amp_native_sync", "time_to_target_s"),
    "native_speedup_vs_torch_eager": ("torch_eager", "time_to_target_s"),
    "native_speedup_vs_torch_batched": ("torch_batched", "time_to_target_s"),
}
DEFAULT_MODELS = ["mlp", "list-rnn", "tree-rnn", "ggsnn-qm9"]
# The most favourable sensible PyTorch settings we measured (bench/README.md, "Choosing the
# PyTorch settings"): eager steps Adam after every instance; batched uses these minibatch sizes.
TORCH_EAGER_EVERY = 1
TORCH_BATCH = {"list-rnn": 64, "tree-rnn": 16, "ggsnn-qm9": 16}


@dataclass(frozen=True)
class Plan:
    """How much to run: ``name`` names the output files; ``epochs`` caps each model's runs.

    ``deadline_s`` bounds the whole run (``None``: no bound): each run gets its share of the time
    left, weighted by ``DEADLINE_WEIGHTS`` over the runs still to come, and stops after the epoch
    that passes it; runs that finish early leave more to the rest.
    """

    name: str
    seeds: tuple[int, ...]
    epochs: Mapping[str, int]
    deadline_s: float | None = None
    systems: tuple[str, ...] = field(default=tuple(SYSTEMS))


# Quick: one seed; each model's cap is about twice the epochs its slowest system needed to reach
# the target in our runs; the deadline (8 min 50 s) keeps `make bench-quick` under 10 minutes
# on a busy 2-core machine even when systems miss their targets (bench/README.md).
PLANS = {
    "quick": Plan("quick", (0,), {"mlp": 40, "list-rnn": 12, "tree-rnn": 16, "ggsnn-qm9": 15},
                  deadline_s=530.0),
    "full": Plan("full", (0, 1, 2), {"mlp": 60, "list-rnn": 30, "tree-rnn": 30, "ggsnn-qm9": 30}),
}


# A run's weight in sharing the deadline: amp_async is what the benchmark is about and the slowest
# to converge (staleness); torch_eager is the slowest per instance; torch_batched needs seconds.
DEADLINE_WEIGHTS = {"amp_async": 2.0, "amp_sync": 0.75, "amp_native_async": 0.5, "amp_native_sync": 0.25,
                    "amp_native_async_2t": 0.5, "amp_native_sync_2t": 0.25, "torch_eager": 1.5,
                    "torch_batched": 0.5, "torch_batched_2t": 0.5}


class Clock:
    """The plan's deadline, shared out among the runs still to come (by ``DEADLINE_WEIGHTS``)."""

    def __init__(self, deadline_s: float | None, runs: Sequence[str]):
        self.start = time.perf_counter()
        self.deadline_s = deadline_s
        self.weight_left = sum(DEADLINE_WEIGHTS[r] for r in runs)

    def next_budget(self, system: str) -> float | None:
        """The share of the time left for a run of ``system`` (None without a deadline)."""
        w = DEADLINE_WEIGHTS[system]
        share = w / self.weight_left if self.weight_left > 0 else 1.0
        self.weight_left -= w
        if self.deadline_s is None:
            return None
        left = self.deadline_s - (time.perf_counter() - self.start)
        return max(left * share, 5.0)


def train_config(entry: ModelSpec, sync: bool, seed: int, epochs: int) -> TrainConfig:
    """The model's defaults for every system, so only the execution differs."""
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


def make_trainer(system: str, entry: ModelSpec, splits: Splits, seed: int, epochs: int) -> TrainerBase:
    backend, mode = SYSTEMS[system]
    config = train_config(entry, mode == "sync", seed, epochs)
    if backend == "amp":
        return Trainer(entry, config, splits)
    if backend == "native":
        from amp_hls.native import NativeTrainer

        return NativeTrainer(entry, config, splits, threads=THREADS.get(system, 1))
    from bench.torch_peers import TorchTrainer  # torch only when a torch system runs

    return TorchTrainer(entry, config, splits, mode=mode, every=TORCH_EAGER_EVERY,
                        batch=TORCH_BATCH.get(entry.name, config.mak))


def system_config(system: str, trainer: TrainerBase) -> dict[str, Any]:
    c = trainer.config
    doc: dict[str, Any] = {"mode": SYSTEMS[system][1], "optimizer": c.optimizer.kind,
                           "lr": c.optimizer.lr, "clip": c.optimizer.clip, "threads": THREADS.get(system, 1)}
    if SYSTEMS[system][0] in ("amp", "native"):
        doc.update(mak=c.mak, muf=c.muf)
    elif SYSTEMS[system][1] == "eager":
        doc["update_every"] = trainer.every  # type: ignore[attr-defined]
    else:
        doc["batch"] = trainer.batch  # type: ignore[attr-defined]
    return doc


def mean_staleness(summary: Mapping[str, Any]) -> float | None:
    """Parameter versions between a forward and its backward, averaged over every gradient."""
    stats = summary.get("staleness")
    if not stats:
        return None
    count = sum(s["count"] for s in stats.values())
    return sum(s["mean"] * s["count"] for s in stats.values()) / count if count else 0.0


def fit(trainer: TrainerBase, budget_s: float | None) -> tuple[bool, list[float]]:
    """Train to the target, the epoch cap or past ``budget_s`` of wall time (training and
    evaluation); returns whether the budget stopped it and the process CPU seconds of training
    at the end of each epoch (robust to other load on the machine, unlike wall time)."""
    stopped = False
    cpu: list[float] = []
    start = time.perf_counter()
    train_epoch = trainer.train_epoch

    def timed_epoch(*args: Any, **kwargs: Any) -> tuple[float, float]:
        t = time.process_time()
        out = train_epoch(*args, **kwargs)
        cpu.append((cpu[-1] if cpu else 0.0) + time.process_time() - t)
        return out

    def on_epoch(record: Any) -> None:
        nonlocal stopped
        spent = time.perf_counter() - start
        if budget_s is not None and spent >= budget_s and not trainer._reached(record):
            stopped = trainer.epoch < trainer.config.epochs
            trainer.config = replace(trainer.config, epochs=trainer.epoch)  # fit's loop ends here

    trainer.train_epoch = timed_epoch  # type: ignore[method-assign]
    trainer.fit(on_epoch=on_epoch)
    return stopped, cpu


def run_system(system: str, entry: ModelSpec, splits: Splits, seed: int, epochs: int,
               budget_s: float | None = None) -> dict[str, Any]:
    """Train one system to the target, the cap or the budget; its numbers and validation curve."""
    trainer = make_trainer(system, entry, splits, seed, epochs)
    config = system_config(system, trainer)
    with torch_threads(THREADS.get(system, 1) if SYSTEMS[system][0] == "torch" else None):
        over_budget, cpu = fit(trainer, budget_s)
    s = trainer.summary()
    if not s.get("conservation_ok", True):  # a run that lost messages measured something else
        raise AmpHlsError(f"{entry.name} conservation check failed: {s['conservation_problems']}")
    record = {
        "seed": seed,
        "instances_per_s": s["instances_per_s"],
        "time_to_target_s": s["time_to_target_s"],
        "reached_target": s["reached_target"],
        "cpu_instances_per_s": s["instances"] / cpu[-1] if cpu and cpu[-1] > 0 else None,
        "cpu_time_to_target_s": next((c for c, r in zip(cpu, trainer.history) if trainer._reached(r)), None),
        "test_metric": s["test_metric"],
        f"test_{entry.metric}": s["test_metric"],
        "val_metric": s[f"val_{entry.metric}"],
        "epochs": s["epochs"],
        "train_s": s["wall_s"],
        "train_cpu_s": cpu[-1] if cpu else 0.0,
        "stopped_by_budget": over_budget,
        "budget_s": budget_s,
        "config": config,
        "curve": [[r.wall_s, r.val_metric] for r in trainer.history],
    }
    if "staleness" in s:
        record["mean_staleness"] = mean_staleness(s)
    return record


def median_time(values: Sequence[float | None]) -> float | None:
    """Median time-to-target, a miss counting as infinitely slow; None when the median run missed."""
    m = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(m) else m


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(runs: list[dict[str, Any]], metric: str, cap: int) -> dict[str, Any]:
    """One system's medians over seeds (the single run's numbers when there is one seed)."""
    test = statistics.median(r["test_metric"] for r in runs)
    return {
        "instances_per_s": statistics.median(r["instances_per_s"] for r in runs),
        "time_to_target_s": median_time([r["time_to_target_s"] for r in runs]),
        "cpu_instances_per_s": _median([r["cpu_instances_per_s"] for r in runs]),
        "cpu_time_to_target_s": median_time([r["cpu_time_to_target_s"] for r in runs]),
        "reached_target_runs": sum(r["reached_target"] for r in runs),
        "stopped_by_budget_runs": sum(r["stopped_by_budget"] for r in runs),
        "test_metric": test,
        f"test_{metric}": test,
        "epochs": statistics.median(r["epochs"] for r in runs),
        "epoch_cap": cap,
        "config": runs[0]["config"],
        "runs": runs,
    }


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch on ``threads`` intra-op threads for one run (None: leave it), then back."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def best(systems: Mapping[str, Mapping[str, Any]], system: str, measure: str) -> Mapping[str, Any] | None:
    """``system`` or its 2-thread twin, whichever measured better on ``measure`` (a time: the
    shorter, a miss counting as infinitely slow; a rate: the higher); None if neither ran."""
    runs = [systems[s] for s in (system, system + THREAD_SUFFIX) if s in systems]
    if not runs:
        return None
    if "time_to_target" in measure:
        return min(runs, key=lambda r: math.inf if r.get(measure) is None else r[measure])
    return max(runs, key=lambda r: r.get(measure) or 0.0)


def _ratio_of(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den is not None and den > 0 else None


def ratios(systems: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """>1 means amp-hls async is better: async/peer instances/s, peer/async time-to-target.

    Only pairs measured in this run; a time ratio is None when either side missed the target.
    A system measured at 1 and 2 threads counts with its better one (``best``), except
    ``native_async_2t_vs_sync_time_to_target``: native async on 2 threads against native sync.
    """
    out: dict[str, float | None] = {}
    a = systems.get("amp_async")
    if a is None:
        return out
    if "amp_sync" in systems:
        s = systems["amp_sync"]
        out[RATIOS[0]] = _ratio_of(a["instances_per_s"], s["instances_per_s"])
        out[RATIOS[1]] = _ratio_of(s["time_to_target_s"], a["time_to_target_s"])
    for key, (peer, measure) in TORCH_RATIOS.items():
        if peer in systems:
            for suffix, m in (("", measure), ("_cpu", f"cpu_{measure}")):
                if suffix and m not in a:
                    continue
                p = best(systems, peer, m)
                assert p is not None
                out[key + suffix] = (_ratio_of(p.get(m), a.get(m)) if measure == "time_to_target_s"
                                     else _ratio_of(a.get(m), p.get(m)))
    for key, (peer, measure) in NATIVE_RATIOS.items():
        n = (systems.get("amp_native_async" + THREAD_SUFFIX) if key.startswith("native_async_2t")
             else best(systems, "amp_native_async", measure))
        p = best(systems, peer, measure)
        if n is not None and p is not None:
            out[key] = (_ratio_of(p[measure], n[measure]) if measure == "time_to_target_s"
                        else _ratio_of(n[measure], p[measure]))
    return out


def systems_for(name: str, plan: Plan) -> list[str]:
    from amp_hls.native import unsupported_kinds

    def runs(system: str) -> bool:
        backend = SYSTEMS[system][0]
        if backend == "native":
            return not unsupported_kinds(MODELS[name].build())
        return backend == "amp" or name in TORCH_MODELS

    return [s for s in plan.systems if runs(s)]


def bench_model(name: str, plan: Plan, clock: Clock | None = None) -> dict[str, Any]:
    """Every system on every seed; the order rotates per seed so drift in machine load evens out."""
    entry = MODELS[name]
    cap = plan.epochs.get(name, entry.defaults.get("epochs", 10))  # a model the plan predates
    systems = systems_for(name, plan)
    clock = clock if clock is not None else Clock(plan.deadline_s, systems * len(plan.seeds))
    runs: dict[str, list[dict[str, Any]]] = {system: [] for system in systems}
    dataset = ""
    for i, seed in enumerate(plan.seeds):
        splits = entry.data(seed)
        dataset = splits.name
        k = i % len(systems)
        for system in systems[k:] + systems[:k]:
            record = run_system(system, entry, splits, seed, cap, clock.next_budget(system))
            print(f"  {name} {system} seed {seed}: {record['epochs']} epochs, "
                  f"{record['train_s']:.1f} s ({record['train_cpu_s']:.1f} s CPU), "
                  f"{record['instances_per_s']:.0f} inst/s, time-to-target "
                  f"{_time(record['time_to_target_s'], cap)}"
                  f"{' (stopped at its time budget)' if record['stopped_by_budget'] else ''}",
                  file=sys.stderr, flush=True)
            runs[system].append(record)
    summaries = {system: summarise(runs[system], entry.metric, cap) for system in systems}
    return {"dataset": dataset, "target": entry.target, "metric": entry.metric,
            "metric_unit": entry.metric_unit, "seeds": list(plan.seeds), "deadline_s": plan.deadline_s,
            "systems": summaries, "ratios": ratios(summaries)}


def machine() -> dict[str, Any]:
    doc = {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
           "platform": platform.platform(), "processor": platform.processor(),
           "threads": "1 (numpy BLAS via threadpoolctl; torch.set_num_threads(1)); the _2t systems 2"}
    if "torch" in sys.modules:
        doc["torch"] = sys.modules["torch"].__version__
    with contextlib.suppress(OSError):
        doc["load_average"] = os.getloadavg()
    return doc


def merge(doc: dict[str, Any], models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Replace only what this run measured; other systems and ratios (other benchmarks') stay."""
    doc["machine"] = {**doc.get("machine", {}), **machine()}
    for name, result in models.items():
        model = doc.setdefault("models", {}).setdefault(name, {})
        model.update({k: v for k, v in result.items() if k not in ("systems", "ratios")})
        model.setdefault("systems", {}).update(result["systems"])
        model.setdefault("ratios", {}).update(result["ratios"])
    return doc


def _time(t: float | None, cap: int) -> str:
    return f"{t:.1f} s" if t is not None else "not reached"


def _ratio(r: float | None) -> str:
    return f"{r:.2f}x" if r is not None else "n/a"


def _metric_name(result: Mapping[str, Any]) -> str:
    metric = result.get("metric", "accuracy")
    return "acc" if metric == "accuracy" else f"{metric} ({result.get('metric_unit') or '-'})"


def report(name: str, result: Mapping[str, Any]) -> str:
    """A readable table of one model's systems and the ratios."""
    seeds = result["seeds"]
    metric = result.get("metric", "accuracy")
    lines = [f"{name} ({result['dataset']}): target val {metric} {result['target']:g}, "
             f"{'median of ' + str(len(seeds)) + ' seeds' if len(seeds) > 1 else f'seed {seeds[0]}'}",
             f"  {'system':<19} {'inst/s':>8} {'time-to-target':>15} {'(CPU s)':>9} "
             f"{'test ' + _metric_name(result):>14} {'epochs':>7}"]
    for system, s in result["systems"].items():
        cpu = s.get("cpu_time_to_target_s")
        lines.append(f"  {system:<19} {s['instances_per_s']:>8.0f} "
                     f"{_time(s['time_to_target_s'], s['epoch_cap']):>15} "
                     f"{f'{cpu:.1f}' if cpu is not None else '-':>9} "
                     f"{s['test_metric']:>14.4f} {s['epochs']:>7g}")
    r = result["ratios"]
    if RATIOS[0] in r:
        lines.append(f"  async/sync instances/s {_ratio(r[RATIOS[0]])}, "
                     f"sync/async time-to-target {_ratio(r[RATIOS[1]])}  (>1: async better)")
    for peer in TORCH_SYSTEMS:
        if f"speedup_vs_{peer}" in r:
            lines.append(f"  vs {peer}: time-to-target speedup {_ratio(r[f'speedup_vs_{peer}'])} "
                         f"(CPU time {_ratio(r.get(f'speedup_vs_{peer}_cpu'))}), instances/s "
                         f"{_ratio(r[f'instances_per_s_vs_{peer}'])}  (>1: amp-hls async faster)")
    if "native_vs_numpy_instances_per_s" in r:
        lines.append(f"  native async (best of 1 and 2 threads): instances/s vs numpy async "
                     f"{_ratio(r['native_vs_numpy_instances_per_s'])}, time-to-target vs native sync "
                     f"{_ratio(r.get('native_async_vs_sync_time_to_target'))} (2 threads: "
                     f"{_ratio(r.get('native_async_2t_vs_sync_time_to_target'))}), "
                     f"vs torch eager {_ratio(r.get('native_speedup_vs_torch_eager'))}, "
                     f"vs torch batched {_ratio(r.get('native_speedup_vs_torch_batched'))}  (>1: native async better)")
    missed = [f"{system} ({len(seeds) - s['reached_target_runs']} of {len(seeds)} runs)"
              for system, s in result["systems"].items() if s["reached_target_runs"] < len(seeds)]
    if missed:
        lines.append(f"  did not reach {result['target']:g} within the epoch cap or time budget: "
                     f"{', '.join(missed)} (their ratios are n/a)")
    return "\n".join(lines)


def plot(name: str, result: Mapping[str, Any], path: Path) -> None:
    """The validation metric against training wall time, one curve per system (and seed)."""
    curves = {}
    for system, summary in result["systems"].items():
        for run in summary["runs"]:
            label = system if len(result["seeds"]) == 1 else f"{system} seed {run['seed']}"
            curves[label] = [tuple(p) for p in run["curve"]]
    metric = result.get("metric", "accuracy")
    unit = result.get("metric_unit")
    label = "validation accuracy" if metric == "accuracy" else f"validation {metric.upper()}" + (
        f" ({unit})" if unit else "")
    plot_curves(curves, path, metric=label, target=result["target"],
                title=f"{name}: amp-hls vs PyTorch (CPU; _2t: 2 threads, else 1)")


@contextlib.contextmanager
def single_threaded(torch_too: bool) -> Iterator[None]:
    """numpy's BLAS (threadpoolctl, from scikit-learn) and torch on one thread each."""
    if torch_too:
        import torch

        torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without the data extra: say so, the numbers then use the BLAS default
        print("note: threadpoolctl missing (pip install 'amp-hls[data]'); numpy BLAS threads not "
              "limited", file=sys.stderr)
        yield
        return
    with threadpool_limits(limits=1):
        yield


def run(plan: Plan, models: Sequence[str], out: Path, plots: bool = True) -> dict[str, Any]:
    """Benchmark ``models``, print the tables, merge into ``out`` and plot beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    torch_too = any(SYSTEMS[s][0] == "torch" for m in models for s in systems_for(m, plan))
    clock = Clock(plan.deadline_s, [s for m in models for s in systems_for(m, plan)] * len(plan.seeds))
    with single_threaded(torch_too):
        for name in models:
            results[name] = bench_model(name, plan, clock)
            print(report(name, results[name]), flush=True)
            if plots:
                plot(name, results[name], out.parent / f"{name}_{out.stem}.png")
    doc = json.loads(out.read_text()) if out.exists() else {}
    write_json(merge(doc, results), out)
    return results


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--quick", dest="plan", action="store_const", const="quick",
                      help="one seed, low epoch caps, a 530 s deadline: under 10 minutes")
    size.add_argument("--full", dest="plan", action="store_const", const="full",
                      help="three seeds, higher epoch caps; reports medians")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=DEFAULT_MODELS,
                   help=f"models to benchmark (default: {' '.join(DEFAULT_MODELS)})")
    p.add_argument("--systems", nargs="+", choices=list(SYSTEMS),
                   help="systems to run (default: all; the torch ones need the bench extra and "
                   f"run only on {', '.join(TORCH_MODELS)}; _2t: on two threads)")
    p.add_argument("--out", type=Path, help="JSON to merge into (default bench/results/<plan>.json)")
    p.add_argument("--epochs", type=int, help="override every model's epoch cap")
    p.add_argument("--deadline", type=float, help="seconds for the whole run, shared out among the runs (0: none)")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plots")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = PLANS[args.plan]
    if args.epochs is not None:
        plan = replace(plan, epochs={m: args.epochs for m in MODELS})
    if args.deadline is not None:
        plan = replace(plan, deadline_s=args.deadline or None)
    systems = tuple(args.systems) if args.systems else tuple(SYSTEMS)
    wants_torch = any(SYSTEMS[s][0] == "torch" for s in systems) and any(m in TORCH_MODELS for m in args.models)
    if wants_torch and not torch_available():
        if args.systems:
            print("error: the torch systems need PyTorch: pip install 'amp-hls[bench]'", file=sys.stderr)
            return 1
        print("note: PyTorch not installed (pip install 'amp-hls[bench]'): skipping the torch "
              "systems", file=sys.stderr)
        systems = tuple(s for s in systems if SYSTEMS[s][0] != "torch")
    plan = replace(plan, systems=systems)
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
