"""``amp-hls train | evaluate | predict``: options, progress bar, summary and files of a run, all
through ``amp_hls.api`` (the Python API does the work; this module only reads options and prints).

Options that set the run (``--mak``, ``--lr`` ...) default to "not given": then the config file's
``[training]`` value applies, else the model's default. A flag the chosen mode would ignore is an
error naming it, and so is a training setting given with ``--resume`` (a resumed cpu run keeps
its checkpoint's settings; ``--epochs`` extends it). Under ``--distributed`` the server's
checkpoint holds weights and optimizer state only, so a resumed job runs with the settings given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .. import api
from ..config import RunConfig, load_config
from ..datasets import Example, load_examples
from ..distributed import DistributedOptions, writes_outputs
from ..errors import AmpHlsError
from ..models import ModelSpec
from ..output import check_output_file
from ..runtime.optim import OPTIMIZERS
from ..runtime.report import write_json
from ..runtime.trainer import EpochRecord, TrainConfig
from .graphs import MODEL_HELP, model_argument

TRAIN_BACKENDS = ("cpu", "native", "numpy-device", "csim", "rtlsim", "pynq")
# the run's settings, by option destination: given ones override the config file and the model
SETTINGS = ("mak", "muf", "epochs", "lr", "optimizer", "clip", "seed", "numerics", "target")
SPLITS = ("train", "val", "test", "all")


def add_data_arguments(p: argparse.ArgumentParser) -> None:
    """The model and its data, as every command that runs examples takes them."""
    p.add_argument("model", type=model_argument, help=MODEL_HELP)
    p.add_argument("--data", type=Path, help="your data file instead of the model's: .jsonl, .csv or .npz "
                   "(docs/your-model.md, Data files)")
    p.add_argument("--dataset-size", help="examples drawn from the model's data set, or 'all' (ggsnn-qm9: "
                   "default 4000, or $AMP_HLS_QM9_SIZE)")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    add_data_arguments(p)
    p.add_argument("--config", type=Path, help="TOML run configuration ([training], [precision], [device], "
                   "[nodes.<name>]); options given here win")
    p.add_argument("--mak", type=int, help="max active keys: instances in flight (model default)")
    p.add_argument("--muf", type=int, help="min update frequency: gradients per node update (model default)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="default adam")
    p.add_argument("--lr", type=float, help="learning rate (model default)")
    p.add_argument("--clip", type=float, help="per-node gradient norm clip, 0 = off (default 5)")
    p.add_argument("--epochs", type=int, help="maximum epochs (model default)")
    p.add_argument("--seed", type=int, help="seeds data, weights and scheduling order (default 0)")
    p.add_argument("--numerics", choices=("float", "fixed"), help="default float")
    p.add_argument("--target", type=float, help="stop when the validation metric (accuracy, or MAE) reaches this (model default)")
    p.add_argument("--no-target", action="store_true", help="run every epoch, ignoring any target")
    p.add_argument("--sync", action="store_true", help="synchronous minibatch baseline (batch = mak)")
    p.add_argument("--backend", choices=TRAIN_BACKENDS, default="cpu",
                   help="cpu: the whole graph on the numpy runtime (float or fixed); native: the same "
                   "semantics compiled to C++ (g++; docs/native.md); numpy-device: "
                   "device nodes on the numpy device model behind the wire format; csim: device nodes "
                   "on the generated HLS C++ (g++); rtlsim: device nodes on the generated RTL under "
                   "Verilator; pynq: a board running --bitstream; all but cpu and native keep "
                   "weights on a host parameter server and need --numerics fixed")
    p.add_argument("--threads", type=int, help="native: worker threads owning the nodes (default 1: the "
                   "deterministic mode, bit-exact with cpu in fixed point)")
    p.add_argument("--bitstream", type=Path, help="pynq: the generated <name>.bit (manifest.json beside it)")
    p.add_argument("--n-sync", type=int,
                   help="device backends, --distributed: gradient dumps per node between weight pushes (default 1)")
    p.add_argument("--distributed", action="store_true",
                   help="under mpiexec: rank 0 is the parameter server, ranks 1..N train disjoint shards (cpu backend)")
    p.add_argument("--worker-timeout", type=float, help="--distributed: drop a worker silent this long (default 30 s)")
    p.add_argument("--eval-every", type=float, help="--distributed: seconds between validations on the server (default 10)")
    p.add_argument("--warm-start", type=Path,
                   help="--distributed: start from the parameters of this checkpoint (e.g. one worker's run)")
    p.add_argument("--project", type=Path, help="csim, rtlsim: where to generate the project (default build/); "
                   "pynq: the project or `amp-hls deploy` folder holding the bitstream")
    p.add_argument("--json", type=Path, help="write the run summary here")
    p.add_argument("--log", type=Path, help="append one line per epoch here as training goes (.csv or .jsonl)")
    p.add_argument("--tensorboard", type=Path, help="write TensorBoard event files into this directory "
                   "(needs tensorboardX: pip install 'amp-hls[tensorboard]')")
    p.add_argument("--plot", type=Path, help="write loss and metric per epoch, training and validation (PNG) here")
    p.add_argument("--checkpoint", type=Path, help="save a checkpoint (.npz) here after every epoch")
    p.add_argument("--resume", type=Path, help="continue from this checkpoint with its settings (--epochs extends it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_model_commands(sub: Any) -> None:
    """``evaluate`` and ``predict``: a trained checkpoint on examples."""
    p = sub.add_parser("evaluate", help="loss and metric of a trained checkpoint on a split of the data")
    add_data_arguments(p)
    p.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint written by `amp-hls train --checkpoint`")
    p.add_argument("--split", choices=SPLITS, default="test", help="which examples (default test)")
    p.add_argument("--seed", type=int, default=0, help="the seed the data was split with (default 0)")
    p.add_argument("--json", type=Path, help="write the evaluation here")
    p.set_defaults(func=run_evaluate)

    p = sub.add_parser("predict", help="a trained checkpoint's predictions, one JSON line per example")
    add_data_arguments(p)
    p.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint written by `amp-hls train --checkpoint`")
    p.add_argument("--split", choices=SPLITS,
                   help="which examples (default test; with --data: every example of the file, in order)")
    p.add_argument("--seed", type=int, default=0, help="the seed the data was split with (default 0)")
    p.add_argument("-o", "--output", type=Path, help="write the predictions here (.jsonl; default: standard output)")
    p.set_defaults(func=run_predict)


# --- the rules of a mode -------------------------------------------------------------------------


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    """The options among ``names`` (destinations) given on the command line, as written."""
    return [f"--{n.replace('_', '-')}" for n in names if getattr(args, n) not in (None, False)]


def check_flags(args: argparse.Namespace, config: RunConfig | None) -> None:
    """Every flag must be one the chosen mode uses; and a resumed run takes no new settings."""
    def refuse(flags: list[str], why: str) -> None:
        if flags:
            raise AmpHlsError(f"{', '.join(flags)}: {why}")

    if args.distributed:
        refuse(["--backend " + args.backend] if args.backend not in ("cpu", "native") else [],
               "--distributed trains on the cpu runtime only, or the native one (each worker a cpu or native trainer)")
        refuse(_given(args, "sync"), "--distributed is asynchronous by design (--sync is the single-process baseline)")
        refuse(_given(args, "threads"), "not with --distributed: each native worker runs on one thread")
        refuse(_given(args, "bitstream", "project"), "these are for device backends, not --distributed")
        refuse(_given(args, "log", "tensorboard"), "not written under --distributed: the server's --json "
               "summary holds its validation history")
    else:
        refuse(_given(args, "worker_timeout", "eval_every", "warm_start"), "only with --distributed")
        refuse(_given(args, "threads") if args.backend != "native" else [], "only with --backend native")
        if args.backend in ("cpu", "native"):
            refuse(_given(args, "n_sync", "bitstream", "project"), "for device backends (--backend numpy-device, "
                   f"csim, rtlsim or pynq); the {args.backend} backend updates in place")
        else:
            refuse(_given(args, "bitstream") if args.backend != "pynq" else [], "only with --backend pynq")
            refuse(_given(args, "project") if args.backend not in ("csim", "rtlsim", "pynq") else [],
                   "only with --backend csim or rtlsim (the project they generate) or pynq (a project "
                   "or `amp-hls deploy` folder with its bitstream)")
    if args.resume is not None and not args.distributed:  # a server checkpoint holds no settings
        refuse(_given(args, *[s for s in SETTINGS if s != "epochs"], "no_target", "sync"),
               "a resumed run keeps its checkpoint's settings; only --epochs may change (to extend it)")
        if config is not None and (config.training or config.precision):
            raise AmpHlsError(f"--resume with --config {args.config}: a resumed run keeps its checkpoint's "
                              "settings; drop the file's [training] and [precision] sections")


# --- commands ------------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace, spec: ModelSpec | None = None,
                     config: RunConfig | None = None) -> TrainConfig:
    """The run's TrainConfig: each option given, else the config file's [training], else the
    model's default (``api.training_config``)."""
    if spec is None:
        spec = api.load_model(args.model, data=args.data, dataset_size=args.dataset_size, config=config)
    return api.training_config(spec, config=config, no_target=args.no_target, sync=args.sync,
                               **{s: getattr(args, s) for s in SETTINGS})


def run_train(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config is not None else None
    check_flags(args, config)
    api.check_outputs(args.log, args.tensorboard, args.plot)  # before any data is read
    if not args.distributed or writes_outputs():  # under mpiexec only the server writes them
        for option, path in (("--json", args.json), ("--plot", args.plot), ("--checkpoint", args.checkpoint)):
            check_output_file(path, option)
    spec = api.load_model(args.model, data=args.data, dataset_size=args.dataset_size, config=config)
    n_sync = args.n_sync if args.n_sync is not None else (config.training.get("n_sync") if config else None)
    train_config = None if args.resume is not None and not args.distributed else config_from_args(args, spec, config)
    if args.distributed:
        assert train_config is not None
        options: dict[str, Any] = {"checkpoint": args.checkpoint, "resume": args.resume,
                                   "warm_start": args.warm_start, "json": args.json, "plot": args.plot,
                                   "backend": args.backend}
        for key, value in (("n_sync", n_sync), ("worker_timeout", args.worker_timeout),
                           ("eval_every_s", args.eval_every)):
            if value is not None:
                options[key] = value
        return api.train_distributed(spec, train_config, DistributedOptions(**options))
    device: dict[str, Any] = {}
    if args.backend not in ("cpu", "native"):
        device = {"n_sync": n_sync, "project": args.project, "bitstream": args.bitstream,
                  "cache_slots": config.device.get("cache_slots") if config else None}
    if args.threads is not None:
        device["threads"] = args.threads
    trainer = api.trainer_for(spec, train_config, backend=args.backend, resume=args.resume,
                              epochs=args.epochs if args.resume is not None else None, **device)
    c = trainer.config
    print(
        f"training {spec.name} on {trainer.splits.name} ({len(trainer.splits.train)} train / "
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
            print(f"epoch {r.epoch}: loss {r.train_loss:.4f} val_{spec.metric} {r.val_metric:.4f} "
                  f"({r.wall_s:.1f} s)", file=sys.stderr)

    summary = api.fit(trainer, checkpoint=args.checkpoint, log=args.log, tensorboard=args.tensorboard,
                      plot=args.plot, summary=args.json, on_epoch=report, progress_factory=bar)
    _print_summary(summary)
    return 0


def _examples(args: argparse.Namespace, spec: ModelSpec) -> list[Example]:
    """The examples a checkpoint runs on: ``--split`` of the model's data (or of ``--data``'s);
    ``predict --data FILE`` without ``--split``: every example of the file, in order."""
    if args.split is None and args.data is not None:
        return load_examples(args.data)
    part = args.split or "test"
    splits = spec.splits(args.seed)
    return [*splits.train, *splits.val, *splits.test] if part == "all" else list(getattr(splits, part))


def run_evaluate(args: argparse.Namespace) -> int:
    spec = api.load_model(args.model, data=args.data, dataset_size=args.dataset_size)
    trained = api.load_predictor(spec, args.checkpoint)
    result = api.evaluate(trained, _examples(args, spec))
    unit = f" {spec.metric_unit}" if spec.metric_unit else ""
    print(f"{spec.name} on {result.count} {args.split} examples: loss {result.loss:.4f}, "
          f"{spec.metric} {result.metric:.4f}{unit}")
    if args.json is not None:
        write_json({"model": spec.name, "split": args.split, "examples": result.count, "loss": result.loss,
                        "metric": spec.metric, spec.metric: result.metric, "metric_unit": spec.metric_unit},
                       args.json)
    return 0


def run_predict(args: argparse.Namespace) -> int:
    spec = api.load_model(args.model, data=args.data, dataset_size=args.dataset_size)
    trained = api.load_predictor(spec, args.checkpoint)
    predictions = api.predict(trained, _examples(args, spec))
    lines = (json.dumps({"example": i, **p.to_json()}) for i, p in enumerate(predictions))
    if args.output is None:
        for line in lines:
            print(line)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text("".join(f"{line}\n" for line in lines))
        print(f"wrote {len(predictions)} predictions to {args.output}", file=sys.stderr)
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
