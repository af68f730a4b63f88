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
    import json
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
    rtl = json.loads((project.root / "manifest.json").read_text())["rtl"]
    print(f"  rtl: {project.root}/rtl ({rtl['top']}); amp-hls testbench {project.root}" if "top" in rtl else
          f"  rtl: none yet, no RTL kernel for node kind(s) {', '.join(rtl['missing_kinds'])}")
    return 0


def cmd_testbench(args: argparse.Namespace) -> int:
    from .codegen.testbench import write_testbench

    files = write_testbench(args.project, instances=args.instances, mak=args.mak, seed=args.seed)
    print(f"wrote {', '.join(str(f) for f in files)}")
    print(f"  pytest {Path(args.project) / 'tb'}   (Verilator + cocotb: amp_top against the numpy device model)")
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


def cmd_report(args: argparse.Namespace) -> int:
    from .cycles import report as rep

    report = rep.project_report(args.project, args.board, args.instances, args.seed)
    print(rep.format_report(report))
    if args.no_measure:
        return 0
    why = rep.rtlsim_unavailable(args.project)
    if why is None:
        print(f"measuring: {args.instances} instances through the RTL simulation (builds it once) ...", flush=True)
    measured = why or rep.measure_project(args.project, args.instances, args.seed)  # a failure exits 2, with its cause
    print(rep.format_measured(report, measured))
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from .codegen.estimate import estimate, family, format_fit, misfits, resolve_board
    from .codegen.project import project_rtl

    sources, top, generated_for = project_rtl(args.project)
    board = resolve_board(args.board or generated_for or "pynq-z2")
    est = estimate(sources, top, family(board), timeout=args.timeout)
    print(format_fit(est, board))
    over = misfits(est, board)
    if over:
        print(f"amp-hls: error: {top} does not fit {board.name}: {'; '.join(over)}", file=sys.stderr)
        return 1
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

    p = sub.add_parser("testbench", help="write a cocotb testbench of a generated project's RTL (pytest DIR/tb)")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--instances", type=int, default=8, help="instances per run (default 8)")
    p.add_argument("--mak", type=int, nargs="+", default=[1, 3],
                   help="instances in flight, one run each (default 1 3); mak x messages one instance "
                   "leaves at a node must not exceed the project's --cache-slots")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_testbench)

    p = sub.add_parser("report", help="cycles per instance per device kernel, bottleneck, DSP-bound peak")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--board", help="clock from this board (default: the project's board)")
    p.add_argument("--instances", type=int, default=16, help="sample instances to count (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-measure", action="store_true",
                   help="skip the RTL simulation of the same instances (a Verilator build)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("estimate", help="Yosys resource estimate of a project's RTL against a board")
    p.add_argument("project", help="directory written by `amp-hls generate` (with rtl/)")
    p.add_argument("--board", help="board name or board .json (default: the project's board)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds Yosys may take (default 3600)")
    p.set_defaults(func=cmd_estimate)

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
