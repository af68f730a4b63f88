"""The ``amp-hls`` command line: the top layer, above everything it dispatches to.

``graphs`` (models, summary, export), ``train`` (train), ``hardware`` (generate, csim, testbench,
report, estimate) and ``demo`` here; nothing below this package imports it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import AmpHlsError
from .graphs import cmd_export, cmd_models, cmd_summary
from .hardware import cmd_csim, cmd_estimate, cmd_generate, cmd_report, cmd_testbench


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(main, args.instances, args.seed)


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

    from .train import add_train_arguments, run_train

    p = sub.add_parser("train", help="train a zoo model on the CPU runtime (async AMP or --sync)")
    add_train_arguments(p)
    p.set_defaults(func=run_train)

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
