"""GPU A-SGD's study at small scale: workers x n_sync under a real mpiexec, time-to-target.

Each cell is one ``mpiexec -disable-auto-cleanup -n W+1 python -m amp_hls.cli train MODEL
--distributed --n-sync N`` run (rank 0 the parameter server, ranks 1..W workers), exactly as a
user runs it; the server's JSON summary gives the time to the model's validation target, the test
metric, staleness and the validation curve. The machine is shared and noisy, so:

- cells run back to back in one script run, worker counts interleaved within each n_sync;
- the 1- and 2-worker cells at the best n_sync are repeated in alternating order (paired by
  seed), and the 2-vs-1 speedup is the median of the paired ratios, with each pair listed;
- every run records the CPU seconds its processes used and the 1-minute load average when it
  started, so a run slowed by someone else's job shows as a low CPU share.

The single-process CPU trainer (``amp-hls train MODEL``) is measured in the same script run as
the reference, and a warm start (workers start from a short single-process run's checkpoint) is
tried with the most workers.

    python -m bench.distributed                      # list-rnn grid, ~30-40 minutes on 2 cores
    python -m bench.distributed --quick              # 1 and 2 workers at n_sync 1 only, a few minutes
    python -m bench.distributed --models ggsnn-qm9 --workers 1 2 --n-sync 1 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from amp_hls.models import MODELS
from amp_hls.runtime.report import write_json

RESULTS = Path(__file__).resolve().parent / "results"
PYTHON = sys.executable
MPIEXEC = shutil.which("mpiexec", path=str(Path(PYTHON).parent)) or shutil.which("mpiexec")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _launch(cmd: list[str], json_path: Path, timeout: float, cwd: Path,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd``; its JSON summary plus the process's wall time, CPU time and machine load."""
    load = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                         env={**os.environ, **(env or {})})
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu0
    if not json_path.exists():
        raise RuntimeError(f"{' '.join(cmd)} wrote no summary (rc {run.returncode}):\n{run.stderr[-3000:]}")
    summary = json.loads(json_path.read_text())
    json_path.unlink()
    out = {"summary": summary, "process_wall_s": wall, "cpu_s": cpu, "load_1min_at_start": load,
           "rc": run.returncode}
    if wall - summary["wall_s"] > 15:  # time outside the training clock: keep the log to see why
        out["log_tail"] = (run.stdout + run.stderr)[-2000:]
    return out


def distributed_cmd(model: str, workers: int, n_sync: int, seed: int, eval_every: float,
                    epochs: int, json_path: Path, warm_start: Path | None = None) -> list[str]:
    cmd = [MPIEXEC, "-disable-auto-cleanup", "-n", str(workers + 1), PYTHON, "-m", "amp_hls.cli",
           "train", model, "--distributed", "--n-sync", str(n_sync), "--eval-every", str(eval_every),
           "--epochs", str(epochs), "--seed", str(seed), "--quiet", "--json", str(json_path)]
    if warm_start is not None:
        cmd += ["--warm-start", str(warm_start)]
    return cmd


# Worker variants, for side-by-side comparisons in one script run: "local" is the default
# (workers also update their own copy between pushes, and wait once more than
# max(2 n_sync, 32) of their dumps are not yet in the server's weights); "grad-only" the earlier
# design (a worker's weights change only when the server pushes); "unbounded" never waits.
# A variant other than the first given runs only with the worker counts named here.
VARIANTS = {"local": {}, "grad-only": {"AMP_HLS_NO_LOCAL_UPDATES": "1"},
            "unbounded": {"AMP_HLS_MAX_UNCONFIRMED": "0"}}
VARIANT_WORKERS = {"local": (1, 2, 4), "grad-only": (1, 2), "unbounded": (4,)}


def run_distributed(model: str, workers: int, n_sync: int, seed: int, eval_every: float,
                    epochs: int, tmp: Path, timeout: float, warm_start: Path | None = None,
                    warm_start_s: float = 0.0, variant: str = "local") -> dict[str, Any]:
    path = tmp / "summary.json"
    cmd = distributed_cmd(model, workers, n_sync, seed, eval_every, epochs, path, warm_start)
    out = _launch(cmd, path, timeout, tmp, VARIANTS[variant])
    s = out.pop("summary")
    instances = sum(int(v) for v in s["worker_instances"].values())
    worker_train = [float(v) for v in s.get("worker_train_s", {}).values()]
    worker_cpu = [float(v) for v in s.get("worker_cpu_s", {}).values()]
    ttt = s["time_to_target_s"]
    record = {
        "system": "distributed", "variant": variant, "workers": workers, "n_sync": n_sync, "seed": seed,
        "warm_start": warm_start is not None, "warm_start_s": warm_start_s,
        "time_to_target_s": ttt,
        "time_to_target_incl_warm_start_s": None if ttt is None else ttt + warm_start_s,
        "reached_target": s["reached_target"], "test_metric": s["test_metric"],
        "final_val_metric": s["history"][-1]["val_metric"] if s["history"] else None,
        "wall_s": s["wall_s"], "updates": s["updates"], "instances": instances,
        "instances_per_s": instances / max(max(worker_train, default=s["wall_s"]), 1e-9),
        # instances trained when the target was reached (the run stops there), else None
        "instances_to_target": instances if s["reached_target"] else None,
        "staleness_mean": s["staleness"]["mean"], "staleness_max": s["staleness"]["max"],
        "worker_train_s": worker_train, "worker_cpu_s": worker_cpu,
        "worker_waited_s": [float(v) for v in s.get("worker_waited_s", {}).values()],
        "server_cpu_s": s.get("server_cpu_s"), "server_eval_cpu_s": s.get("server_eval_cpu_s"),
        "dropped_workers": s["dropped_workers"],
        "curve": [[r["wall_s"], r["val_metric"]] for r in s["history"]],
        **out,
    }
    record["cpu_share"] = record["cpu_s"] / max(record["process_wall_s"], 1e-9)
    return record


def run_single(model: str, seed: int, epochs: int, tmp: Path, timeout: float,
               extra: list[str] | None = None) -> dict[str, Any]:
    """The single-process CPU trainer: time-to-target is its training time (evaluation excluded)."""
    path = tmp / "single.json"
    cmd = [PYTHON, "-m", "amp_hls.cli", "train", model, "--seed", str(seed), "--epochs", str(epochs),
           "--quiet", "--json", str(path), *(extra or [])]
    out = _launch(cmd, path, timeout, tmp)
    s = out.pop("summary")
    record = {
        "system": "single", "workers": 0, "n_sync": None, "seed": seed,
        "time_to_target_s": s["time_to_target_s"], "reached_target": s["reached_target"],
        "test_metric": s["test_metric"], "final_val_metric": s["history"][-1]["val_metric"],
        "wall_s": s["wall_s"], "instances": s["instances"], "instances_per_s": s["instances_per_s"],
        "instances_to_target": s["instances"] if s["reached_target"] else None,
        "epochs": s["epochs"], "curve": [[r["wall_s"], r["val_metric"]] for r in s["history"]],
        **out,
    }
    record["cpu_share"] = record["cpu_s"] / max(record["process_wall_s"], 1e-9)
    return record


def _ttt(run: dict[str, Any]) -> float:
    t = run["time_to_target_s"]
    return float("inf") if t is None else float(t)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    m = statistics.median(values)
    return None if m == float("inf") else m


def _log(run: dict[str, Any]) -> None:
    t = run["time_to_target_s"]
    label = "single" if run["system"] == "single" else f"W={run['workers']} n_sync={run['n_sync']}"
    if run.get("warm_start"):
        label += " warm"
    if run.get("variant", "local") != "local":
        label += f" {run['variant']}"
    print(f"  {label:<22} seed {run['seed']}: time to target {f'{t:6.1f} s' if t is not None else '   miss '} "
          f"test {run['test_metric']:.4f}  wall {run['process_wall_s']:5.1f} s  cpu share "
          f"{run['cpu_share']:.2f}  load {run['load_1min_at_start']:.1f}"
          + (f"  staleness {run['staleness_mean']:.0f}" if run["system"] == "distributed" else ""),
          flush=True)


def study(model: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    entry = MODELS[model]
    runs: list[dict[str, Any]] = []
    variants = args.variants
    main = variants[0]

    def add(run: dict[str, Any]) -> dict[str, Any]:
        runs.append(run)
        _log(run)
        return run

    def dist(workers: int, n_sync: int, seed: int, **kw: Any) -> dict[str, Any]:
        return add(run_distributed(model, workers, n_sync, seed, args.eval_every, args.epochs, tmp,
                                   args.timeout, **kw))

    print(f"{model}: target {entry.target} ({entry.metric}), {os.cpu_count()} CPUs", flush=True)
    for seed in range(args.single):
        add(run_single(model, seed, args.epochs, tmp, args.timeout))
    # the grid: worker counts (and variants) side by side within each n_sync
    for n_sync in [] if args.no_grid else args.n_sync:
        for workers in args.workers:
            for variant in variants:
                if variant == main or workers in VARIANT_WORKERS[variant]:
                    dist(workers, n_sync, 0, variant=variant)
    # repeat 1 vs 2 workers at the n_sync where they did best, alternating which goes first
    pair = [w for w in (1, 2) if w in args.workers]
    best = (args.warm_n_sync or args.n_sync)[0] if args.no_grid else min(args.n_sync, key=lambda n: statistics.median(
        [_ttt(r) for r in runs if r["system"] == "distributed" and r["n_sync"] == n
         and r["workers"] in pair and r["variant"] == main]))
    for rep in range(0 if args.no_grid else args.repeats):
        seed = rep + 1
        for workers in (pair if rep % 2 else pair[::-1]):
            for variant in variants:
                if variant == main or workers in VARIANT_WORKERS[variant]:
                    dist(workers, best, seed, variant=variant)
    # warm start: every worker count from a short single-process run's checkpoint
    warm: dict[str, Any] | None = None
    if args.warm_start_epochs:
        ckpt = tmp / "warm.npz"
        pre = run_single(model, 0, args.warm_start_epochs, tmp, args.timeout,
                         ["--no-target", "--checkpoint", str(ckpt)])
        print(f"  warm start: {args.warm_start_epochs} single-process epoch(s), {pre['wall_s']:.1f} s "
              f"training, val {pre['final_val_metric']:.4f}", flush=True)
        warm = {"epochs": args.warm_start_epochs, "train_s": pre["wall_s"],
                "val_metric": pre["final_val_metric"], "process_wall_s": pre["process_wall_s"]}
        for n_sync in args.warm_n_sync or [best]:
            for workers in args.workers:
                dist(workers, n_sync, 0, warm_start=ckpt, warm_start_s=pre["wall_s"], variant=main)
    result = {"model": model, "metric": entry.metric, "target": entry.target, "best_n_sync": best,
              "variants": variants, "warm_start": warm, "runs": runs}
    result.update(summarise(runs, args, best, main))
    if len(variants) > 1:
        result["by_variant"] = {v: summarise(runs, args, best, v) for v in variants}
    return result


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace, best: int, variant: str) -> dict[str, Any]:
    cold = [r for r in runs if r["system"] == "distributed" and not r.get("warm_start")
            and r["variant"] == variant]
    grid = []
    for n_sync in args.n_sync:
        for workers in args.workers:
            cell = [r for r in cold if r["n_sync"] == n_sync and r["workers"] == workers]
            if not cell:
                continue
            times = [_ttt(r) for r in cell]
            grid.append({
                "variant": variant, "workers": workers, "n_sync": n_sync, "runs": len(cell),
                "reached": sum(r["reached_target"] for r in cell),
                "time_to_target_s": [r["time_to_target_s"] for r in cell],
                "median_time_to_target_s": _median(times),
                "test_metric": [r["test_metric"] for r in cell],
                "instances_to_target": [r["instances_to_target"] for r in cell],
                "staleness_mean": statistics.mean(r["staleness_mean"] for r in cell),
                "instances_per_s": statistics.mean(r["instances_per_s"] for r in cell),
                "server_cpu_per_worker_cpu": statistics.mean(
                    r["server_cpu_s"] / max(sum(r["worker_cpu_s"]), 1e-9) for r in cell),
                "cpu_share": statistics.mean(r["cpu_share"] for r in cell),
                "load_1min": statistics.mean(r["load_1min_at_start"] for r in cell),
            })
    # 2 vs 1 workers: ratios of runs with the same seed and n_sync, which ran next to each other
    pairs = []
    for n_sync in args.n_sync:
        for seed in sorted({r["seed"] for r in cold}):
            one = [r for r in cold if r["workers"] == 1 and r["n_sync"] == n_sync and r["seed"] == seed]
            two = [r for r in cold if r["workers"] == 2 and r["n_sync"] == n_sync and r["seed"] == seed]
            if one and two:
                a, b = _ttt(one[0]), _ttt(two[0])
                pairs.append({"n_sync": n_sync, "seed": seed, "one_worker_s": one[0]["time_to_target_s"],
                              "two_workers_s": two[0]["time_to_target_s"],
                              "speedup": (a / b) if b != float("inf") and a != float("inf") else None})
    at_best = [p for p in pairs if p["n_sync"] == best]
    # a pair where one side missed still says who won: count wins, take the median of the rest
    wins = sum(_ttt_pair(p) for p in at_best)
    ratios = [p["speedup"] for p in at_best if p["speedup"] is not None]
    single = [r for r in runs if r["system"] == "single"]
    return {
        "grid": grid,
        "two_vs_one_pairs": pairs,
        "two_vs_one_wins_at_best": f"{wins}/{len(at_best)}",
        "two_vs_one_speedup_at_best": statistics.median(ratios) if ratios else None,
        "two_vs_one_speedup_range": [min(ratios), max(ratios)] if ratios else None,
        "single_process_time_to_target_s": [r["time_to_target_s"] for r in single],
    }


def _ttt_pair(p: dict[str, Any]) -> bool:
    one = float("inf") if p["one_worker_s"] is None else p["one_worker_s"]
    two = float("inf") if p["two_workers_s"] is None else p["two_workers_s"]
    return two < one


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target, main = result["target"], result["variants"][0]
    runs = [r for r in result["runs"] if r["system"] == "single" or r["variant"] == main]
    n_syncs = sorted({r["n_sync"] for r in runs if r["system"] == "distributed" and not r.get("warm_start")})
    cols = max(len(n_syncs), 1)
    fig = plt.figure(figsize=(max(4.6 * cols, 8.0), 8.0))
    grid = fig.add_gridspec(2, cols)
    axes = [[fig.add_subplot(grid[0, i]) for i in range(len(n_syncs))] + [fig.add_subplot(grid[1, :])]]
    colours = {1: "tab:blue", 2: "tab:orange", 4: "tab:green", 8: "tab:red"}
    for ax, n_sync in zip(axes[0], n_syncs):
        for r in runs:
            if r["system"] == "single" and r["seed"] == 0:
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, color="grey", linewidth=1, label="single process")
        labelled = set()
        for r in runs:
            if r["system"] != "distributed" or r["n_sync"] != n_sync or r.get("warm_start") or not r["curve"]:
                continue
            xs, ys = zip(*r["curve"])
            key = (r["workers"], r["seed"] == 0)
            label = None if key in labelled else (
                f"{r['workers']} worker(s)" + ("" if r["seed"] == 0 else ", other seeds"))
            labelled.add(key)
            ax.plot(xs, ys, color=colours.get(r["workers"], "black"), linewidth=1.2 if r["seed"] == 0 else 0.7,
                    alpha=1.0 if r["seed"] == 0 else 0.35, label=label)
        for r in runs:  # warm starts at this n_sync, shifted by their pre-training time
            if r.get("warm_start") and r["n_sync"] == n_sync and r["curve"]:
                xs, ys = zip(*r["curve"])
                ax.plot([x + r["warm_start_s"] for x in xs], ys, linestyle=":",
                        color=colours.get(r["workers"], "black"), label=f"{r['workers']} warm (+pretrain)")
        if target is not None:
            ax.axhline(target, linestyle="--", color="grey", linewidth=1)
        ax.set_title(f"n_sync = {n_sync}")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel(f"validation {result['metric']}")
        if result["metric"] == "accuracy":
            ax.set_ylim(0.5, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    labels, values, lows, highs = [], [], [], []
    cells = [c for v in result["variants"] for c in
             (result["by_variant"][v]["grid"] if "by_variant" in result else result["grid"])]
    cells.sort(key=lambda c: (c["n_sync"], c["workers"], c["variant"] != main))
    for cell in cells:
        times = [t for t in cell["time_to_target_s"] if t is not None]
        labels.append(f"{cell['workers']}w/{cell['n_sync']}" + ("" if cell["variant"] == main else f" {cell['variant']}"))
        med = cell["median_time_to_target_s"]
        values.append(med if med is not None else 0.0)
        lows.append(med - min(times) if times and med is not None else 0.0)
        highs.append(max(times) - med if times and med is not None else 0.0)
    bars = ax.bar(range(len(labels)), values, yerr=[lows, highs], capsize=3,
                  color=[colours.get(c["workers"], "black") for c in cells],
                  hatch=None)
    for bar, cell in zip(bars, cells):
        if cell["variant"] != main:
            bar.set_hatch("//")
            bar.set_alpha(0.5)
        if cell["median_time_to_target_s"] is None:
            ax.text(bar.get_x() + bar.get_width() / 2, 1, "miss", ha="center", fontsize=7, rotation=90)
    single = [t for t in result["single_process_time_to_target_s"] if t is not None]
    if single:
        ax.axhline(statistics.median(single), color="grey", linestyle="--", linewidth=1, label="single process")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("time to target (s), median and range")
    ax.set_title("workers / n_sync")
    fig.suptitle(f"{result['model']}: distributed A-SGD on {os.cpu_count()} CPUs")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["list-rnn"], choices=sorted(MODELS))
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    p.add_argument("--n-sync", nargs="+", type=int, default=[1, 10, 100])
    p.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["local"],
                   help="worker variants side by side; the first is the one the study is about")
    p.add_argument("--repeats", type=int, default=3,
                   help="extra 1- and 2-worker runs (seeds 1..) at the best n_sync")
    p.add_argument("--single", type=int, default=2, help="single-process reference runs (seeds 0..)")
    p.add_argument("--warm-start-epochs", type=int, default=1,
                   help="single-process epochs before the warm-started runs (0 = no warm start)")
    p.add_argument("--warm-n-sync", nargs="*", type=int, help="n_sync of the warm runs (default: the best)")
    p.add_argument("--eval-every", type=float, default=1.0, help="server validation interval (s)")
    p.add_argument("--epochs", type=int, default=12, help="epoch cap of every run (of the whole data set)")
    p.add_argument("--timeout", type=float, default=600.0, help="per-run limit (s)")
    p.add_argument("--no-grid", action="store_true", help="only the warm-start runs (at --warm-n-sync)")
    p.add_argument("--quick", action="store_true", help="1 and 2 workers at n_sync 1, no repeats or warm start")
    p.add_argument("--out", type=Path, default=RESULTS / "distributed.json")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--replot", action="store_true", help="only redraw the plots of the --out JSON")
    args = p.parse_args(argv)
    if args.replot:
        for model, result in json.loads(args.out.read_text())["models"].items():
            plot(result, args.out.parent / f"distributed_{model}.png")
        return 0
    if MPIEXEC is None:
        print("needs mpiexec: pip install 'amp-hls[mpi]'", file=sys.stderr)
        return 2
    if args.quick:
        args.workers, args.n_sync, args.repeats, args.single, args.warm_start_epochs = [1, 2], [1], 0, 1, 0
    doc: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": {},
    }
    if args.out.exists():  # keep other models' results from earlier runs
        try:
            doc["models"] = json.loads(args.out.read_text()).get("models", {})
        except (OSError, ValueError):
            pass
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amp_dist_") as tmp:
        for model in args.models:
            result = study(model, args, Path(tmp))
            doc["models"][model] = result
            doc["elapsed_s"] = time.monotonic() - started
            write_json(doc, args.out)
            if not args.no_plot:
                plot(result, args.out.parent / f"distributed_{model}.png")
            print_table(result)
    print(f"wrote {args.out} in {time.monotonic() - started:.0f} s")
    return 0


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{result['model']} (target {result['target']}): time to target, median over runs")
    print(f"{'variant':>9} {'workers':>7} {'n_sync':>6} {'runs':>4} {'reached':>7} {'median s':>9} {'test':>7} "
          f"{'staleness':>9} {'inst/s':>7} {'srv/wrk cpu':>11} {'cpu share':>9}")
    for v in result["variants"]:
        summary = result["by_variant"][v] if "by_variant" in result else result
        for c in summary["grid"]:
            med = c["median_time_to_target_s"]
            print(f"{v:>9} {c['workers']:>7} {c['n_sync']:>6} {c['runs']:>4} {c['reached']:>7} "
                  f"{f'{med:.1f}' if med is not None else 'miss':>9} {statistics.median(c['test_metric']):>7.4f} "
                  f"{c['staleness_mean']:>9.1f} {c['instances_per_s']:>7.0f} "
                  f"{c['server_cpu_per_worker_cpu']:>11.2f} {c['cpu_share']:>9.2f}")
        best = result["best_n_sync"]
        print(f"{v}: 2 vs 1 workers at n_sync={best}: 2 workers faster in {summary['two_vs_one_wins_at_best']} "
              f"pairs, median speedup {summary['two_vs_one_speedup_at_best']} (seed, speedup: "
              f"{[(p['seed'], p['speedup']) for p in summary['two_vs_one_pairs'] if p['n_sync'] == best]})")


if __name__ == "__main__":
    sys.exit(main())
