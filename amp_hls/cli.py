"""The ``amp-hls`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import AmpHlsError
from .ir import GraphCore, load, save
from .models import MODELS


def _graph(spec: str) -> GraphCore:
    """A zoo model name, or a path to a graph JSON document."""
    if spec in MODELS:
        return MODELS[spec].build()
    if spec.endswith(".json") or Path(spec).exists():
        return load(spec)
    raise AmpHlsError(f"{spec!r} is neither a model ({', '.join(MODELS)}) nor a graph JSON file")


def cmd_models(args: argparse.Namespace) -> int:
    width = max(map(len, MODELS))
    for name, entry in MODELS.items():
        print(f"{name:{width}s}  {entry.description}")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    print(_graph(args.model).summary())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    save(_graph(args.model), args.output)
    print(f"wrote {args.output}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .runtime.train_cli import run_train

    return run_train(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.instances, args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amp-hls",
        description="Asynchronous model-parallel training of dynamic neural networks, "
        "from numpy to HLS and RTL.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("summary", help="print a model's graph as a table")
    p.add_argument("model", help="zoo model name or graph .json file")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("export", help="write a model's graph as JSON")
    p.add_argument("model", help="zoo model name or graph .json file")
    p.add_argument("-o", "--output", required=True, help="destination .json file")
    p.set_defaults(func=cmd_export)

    from .runtime.train_cli import add_train_arguments

    p = sub.add_parser("train", help="train a zoo model on the CPU runtime (async AMP or --sync)")
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("demo", help="build the example models and push instances through them")
    p.add_argument("--instances", type=int, default=8, help="instances per model (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except AmpHlsError as exc:
        print(f"amp-hls: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
