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


def cmd_generate(args: argparse.Namespace) -> int:
    import time

    from .codegen.boards import load_board
    from .codegen.hls import HlsOptions
    from .codegen.project import generate_project

    start = time.perf_counter()
    board = load_board(args.board)  # an unknown board fails before anything is written
    graph = _graph(args.model)  # so does a graph that breaks the IR (names included)
    options = HlsOptions(muf=args.muf, cache_slots=args.cache_slots)
    project = generate_project(graph, args.output, board, options)
    n = len(project.hls.placement.device_nodes)
    print(f"wrote {project.root}: {n} kernels + boundary for {board.name} ({board.part}) "
          f"in {time.perf_counter() - start:.2f} s")
    print(f"  make -C {project.root} csim | ip | bitstream   -> {project.name}.bit + {project.name}.hwh")
    return 0


def cmd_csim(args: argparse.Namespace) -> int:
    from .codegen.project import open_project
    from .host.csim import CsimDevice, build_csim

    project = open_project(args.project)
    library = build_csim(project)  # a compiler failure is a CompileError: exit 2 with g++'s message
    device = CsimDevice(project, library)  # loads the library and resets every kernel
    out = device.recv(timeout=args.timeout)  # an idle device must stay quiet and error-free
    if out:
        print(f"amp-hls: error: the reset C simulation emitted {len(out)} messages unprompted", file=sys.stderr)
        return 1
    print(f"built {library}")
    print(f"loaded: {len(project.placement.device_nodes)} kernels, {len(project.placement.channels)} "
          "channels; reset and idle: ok")
    return 0


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

    p = sub.add_parser("generate", help="write the HLS C++ and the board project (tcl, Makefile)")
    p.add_argument("model", help="zoo model name or graph .json file")
    p.add_argument("-o", "--output", required=True, help="project directory (created)")
    p.add_argument("--board", default="pynq-z2", help="pynq-z2 (default), zcu104 or kv260: hw/boards/*.json")
    p.add_argument("--muf", type=int, default=1, help="backward messages between GRADS dumps (default 1)")
    p.add_argument("--cache-slots", type=int, default=64,
                   help="tag-table entries per caching kernel, >= mak x messages per instance (default 64)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("csim", help="rebuild a generated project's C simulation with g++ and load it")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the idle check")
    p.set_defaults(func=cmd_csim)

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
