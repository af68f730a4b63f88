"""``amp-hls train``: options, progress bar, summary, checkpoints and plot for one training run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..errors import AmpHlsError
from ..models import MODELS
from ..runtime.optim import OPTIMIZERS, OptimizerConfig
from ..runtime.report import plot_curves, write_json
from ..runtime.trainer import EpochRecord, TrainConfig, Trainer, TrainerBase

TRAIN_BACKENDS = ("cpu", "numpy-device", "csim", "rtlsim", "pynq")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", choices=sorted(MODELS), help="zoo model (see `amp-hls models`)")
    p.add_argument("--mak", type=int, help="max active keys: instances in flight (model default)")
    p.add_argument("--muf", type=int, help="min update frequency: gradients per node update (model default)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    p.add_argument("--lr", type=float, help="learning rate (model default)")
    p.add_argument("--clip", type=float, default=5.0, help="per-node gradient norm clip (0 = off)")
    p.add_argument("--epochs", type=int, help="maximum epochs (model default)")
    p.add_argument("--seed", type=int, default=0, help="seeds data, weights and scheduling order")
    p.add_argument("--numerics", choices=("float", "fixed"), default="float")
    p.add_argument("--target", type=float, help="stop when the validation metric (accuracy, or MAE) reaches this (model default)")
    p.add_argument("--no-target", action="store_true", help="run every epoch, ignoring any target")
    p.add_argument("--sync", action="store_true", help="synchronous minibatch baseline (batch = mak)")
    p.add_argument("--backend", choices=TRAIN_BACKENDS, default="cpu",
                   help="cpu: the whole graph on the numpy runtime (float or fixed); numpy-device: "
                   "device nodes on the numpy device model behind the wire format; csim: device nodes "
                   "on the generated HLS C++ (g++); rtlsim: device nodes on the generated RTL under "
                   "Verilator; pynq: a board running --bitstream; all but cpu keep "
                   "weights on a host parameter server and need --numerics fixed")
    p.add_argument("--bitstream", type=Path, help="pynq: the generated <name>.bit (manifest.json beside it)")
    p.add_argument("--n-sync", type=int, default=1,
                   help="device backends: gradient dumps per node between weight pushes (default 1)")
    p.add_argument("--distributed", action="store_true",
                   help="under mpiexec: rank 0 is the parameter server, ranks 1..N train disjoint shards")
    p.add_argument("--worker-timeout", type=float, default=30.0,
                   help="--distributed: drop a worker silent this long (seconds)")
    p.add_argument("--eval-every", type=float, default=10.0,
                   help="--distributed: seconds between validations on the server")
    p.add_argument("--warm-start", type=Path,
                   help="--distributed: start from the parameters of this checkpoint (e.g. one worker's run)")
    p.add_argument("--project", type=Path, help="csim, rtlsim: where to generate the project (default build/)")
    p.add_argument("--json", type=Path, help="write the run summary here")
    p.add_argument("--plot", type=Path, help="write the validation metric vs wall time (PNG) here")
    p.add_argument("--checkpoint", type=Path, help="save a checkpoint (.npz) here after every epoch")
    p.add_argument("--resume", type=Path, help="continue from this checkpoint (its settings win)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    entry = MODELS[args.model]
    d = entry.defaults
    target = None if args.no_target else (args.target if args.target is not None else entry.target)

    def given(value: Any, default: Any) -> Any:
        # `--mak 0` must reach TrainConfig's check, not silently become the default
        return default if value is None else value

    return TrainConfig(
        mak=given(args.mak, d.get("mak", 16)),
        muf=given(args.muf, d.get("muf", 8)),
        optimizer=OptimizerConfig(
            args.optimizer, lr=given(args.lr, d.get("lr", 1e-3)), clip=args.clip or None
        ),
        epochs=given(args.epochs, d.get("epochs", 10)),
        seed=args.seed,
        numerics=args.numerics,
        target=target,
        sync=args.sync,
    )


def run_train(args: argparse.Namespace) -> int:
    entry = MODELS[args.model]
    if args.distributed:
        from ..distributed import DistributedOptions, run_distributed

        options = DistributedOptions(
            n_sync=args.n_sync, worker_timeout=args.worker_timeout, eval_every_s=args.eval_every,
            checkpoint=args.checkpoint, resume=args.resume, warm_start=args.warm_start,
            json=args.json, plot=args.plot,
        )
        return run_distributed(entry, config_from_args(args), options)
    trainer: TrainerBase
    if args.backend != "cpu":
        if args.resume is not None:
            raise AmpHlsError("--resume works with the cpu backend only")
        from ..host.trainer import DeviceTrainer

        trainer = DeviceTrainer(entry, config_from_args(args), args.backend, args.n_sync,
                                project_dir=args.project, bitstream=args.bitstream)
    elif args.resume is not None:
        trainer = Trainer.resume(entry, args.resume, epochs=args.epochs)
    else:
        trainer = Trainer(entry, config_from_args(args))
    c = trainer.config
    print(
        f"training {entry.name} on {trainer.splits.name} ({len(trainer.splits.train)} train / "
        f"{len(trainer.splits.val)} val / {len(trainer.splits.test)} test), "
        f"{'sync batch' if c.sync else 'async mak'}={c.mak} muf={c.muf} {c.optimizer.kind} "
        f"lr={c.optimizer.lr:g} numerics={c.numerics} target={c.target}",
        file=sys.stderr,
    )

    def bar(epoch: int, total: int) -> tqdm:
        return tqdm(total=total, desc=f"epoch {epoch + 1}/{c.epochs}", unit="inst",
                    disable=args.quiet, leave=True, file=sys.stderr)

    def report(r: EpochRecord) -> None:
        if args.quiet:
            print(f"epoch {r.epoch}: loss {r.train_loss:.4f} val_{entry.metric} {r.val_metric:.4f} "
                  f"({r.wall_s:.1f} s)", file=sys.stderr)

    trainer.fit(checkpoint=args.checkpoint, on_epoch=report, progress_factory=bar)
    summary = trainer.summary()
    _print_summary(summary)
    if args.json is not None:
        write_json(summary, args.json)
    if args.plot is not None:
        curve = [(r.wall_s, r.val_metric) for r in trainer.history]
        label = f"validation {entry.metric}" + (f" ({entry.metric_unit})" if entry.metric_unit else "")
        plot_curves({f"amp-hls {summary['mode']} ({summary['backend']})": curve}, args.plot,
                    metric=label, target=c.target, title=f"{entry.name}: {label}")
    if not summary["conservation_ok"]:
        raise AmpHlsError(f"conservation check failed: {summary['conservation_problems']}")
    return 0


def _print_summary(s: dict) -> None:
    stale = ", ".join(f"{k} mean {v['mean']:.1f} max {v['max']}" for k, v in s["staleness"].items())
    ttt = s["time_to_target_s"]
    reached = f"{ttt:.1f} s" if ttt is not None else "not reached"
    print(
        f"{s['model']} ({s['mode']}, {s['backend']}, {s['numerics']}): test {s['metric']} "
        f"{s['test_metric']:.4f}{' ' + s['metric_unit'] if s['metric_unit'] else ''} after "
        f"{s['epochs']} epochs, {s['wall_s']:.1f} s training, {s['instances_per_s']:.0f} instances/s, "
        f"time to target {reached}, "
        f"conservation {'ok' if s['conservation_ok'] else 'FAILED'}\n  staleness (updates between "
        f"forward and backward): {stale}"
    )
