"""The ``amp-hls`` command line: the top layer, above everything it dispatches to.

``graphs`` (models, summary, export), ``train`` (train), ``hardware`` (generate, csim, testbench,
report, estimate) and ``demo`` here; nothing below this package imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, AmpHlsError, escape_controls
from ..version import __version__
from .graphs import GRAPH_HELP, cmd_export, cmd_models, cmd_summary
from .hardware import (
    add_fold_options,
    add_model_option,
    cmd_csim,
    cmd_deploy,
    cmd_estimate,
    cmd_generate,
    cmd_report,
    cmd_testbench,
)


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    return run_demo(main, args.instances, args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amp-hls",
        description="Asynchronous model-parallel training of dynamic neural networks, "
        "from numpy to HLS and RTL.",
    )
    parser.add_argument("--version", action="version", version=f"amp-hls {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("models", help="list the model zoo")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("summary", help="print a model's graph as a table")
    p.add_argument("model", help=GRAPH_HELP)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("export", help="write a model's graph as JSON")
    p.add_argument("model", help=GRAPH_HELP)
    p.add_argument("-o", "--output", required=True, help="destination .json file")
    p.set_defaults(func=cmd_export)

    from .train import add_model_commands, add_train_arguments, run_train

    p = sub.add_parser("train", help="train a model (zoo or file) on the CPU runtime, a device or MPI ranks")
    add_train_arguments(p)
    p.set_defaults(func=run_train)
    add_model_commands(sub)

    p = sub.add_parser("generate", help="write the HLS C++ and the board project (tcl, Makefile)")
    p.add_argument("model", help=GRAPH_HELP)
    p.add_argument("-o", "--output", required=True,
                   help="project directory: new, empty, or a project amp-hls wrote (created)")
    p.add_argument("--force", action="store_true",
                   help="also overwrite files of DIR that a user changed or that amp-hls did not write "
                   "(none is ever deleted)")
    p.add_argument("--board", help="pynq-z2 (default), zcu104 or kv260: hw/boards/*.json")
    p.add_argument("--muf", type=int, help="backward messages between GRADS dumps (default 1)")
    p.add_argument("--cache-slots", type=int,
                   help="tag-table entries per caching kernel, >= mak x messages per instance "
                   "(default: mak x the most messages one of the model's instances leaves at a node)")
    p.add_argument("--mak", type=int, help="the most instances in flight the design is sized for "
                   "(default: the model's training default, or what --cache-slots holds)")
    p.add_argument("--dump-engine", action="store_true", default=None,
                   help="rtl flow: each Linear copies its gradient sums into a dump buffer that streams out "
                   "beside its MACs, instead of stalling for the dump (one more accumulator-sized memory "
                   "per Linear)")
    p.add_argument("--flow", choices=("rtl", "hls"), default="rtl",
                   help="rtl (default): the verified SystemVerilog amp_top into Vivado; hls: Vitis HLS "
                   "kernel cores (and a C++ testbench for Vitis csim/cosim)")
    p.add_argument("--config", type=Path, help="TOML run configuration: [precision], [device], [nodes.<name>] "
                   "parallelism, [training] muf; options given here win")
    add_fold_options(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("deploy", help="one folder to copy onto the board: bitstream, manifest, driver, instructions")
    p.add_argument("project", help="directory written by `amp-hls generate`, with its bitstream built")
    p.add_argument("-o", "--output", required=True, help="the folder to write (new or empty)")
    p.add_argument("--model", help="the model file to train (default: the zoo model of the project's graph)")
    p.add_argument("--data", type=Path, help="the model's data from this file (.jsonl, .csv or .npz), copied along")
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("csim", help="rebuild a generated project's C simulation with g++ and load it")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the idle check")
    p.set_defaults(func=cmd_csim)

    p = sub.add_parser("testbench", help="write a cocotb testbench of a generated project's RTL (pytest DIR/tb)")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--instances", type=int, default=8, help="instances per run (default 8)")
    p.add_argument("--mak", type=int, nargs="+",
                   help="instances in flight, one run each (default 1 3, each lowered to what the "
                   "project's tag caches hold); mak x messages one instance leaves at a node must not "
                   "exceed the project's --cache-slots")
    p.add_argument("--seed", type=int, default=0)
    add_model_option(p)
    p.set_defaults(func=cmd_testbench)

    p = sub.add_parser("report", help="cycles per instance per device kernel, bottleneck, DSP-bound peak")
    p.add_argument("project", help="directory written by `amp-hls generate`")
    p.add_argument("--board", help="clock from this board (default: the project's board)")
    p.add_argument("--instances", type=int, default=16, help="sample instances to count (default 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-measure", action="store_true",
                   help="skip the RTL simulation of the same instances (a Verilator build)")
    p.add_argument("--profile", action="store_true",
                   help="measure on a build that counts, on every stream, the cycles its writer waited for "
                        "room and how full it got, and list the streams that waited longest (a Verilator "
                        "build of its own; the same cycles)")
    add_model_option(p)
    p.add_argument("--json", type=Path, help="also write the report (and the measurement) here as JSON")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("estimate", help="Yosys resource estimate of a project's RTL against a board")
    p.add_argument("project", help="directory written by `amp-hls generate` (with rtl/)")
    p.add_argument("--board", help="board name or board .json (default: the project's board)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds Yosys may take (default 3600)")
    p.add_argument("--json", type=Path, help="also write the estimate here as JSON")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("demo", help="build the example models and push instances through them")
    p.add_argument("--instances", type=int, default=8, help="instances per model (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command. Bad input (an AmpHlsError, or a file the system refuses) is one
    line and exit 2; SIGINT is one line saying what it left behind and exit 130; only a bug
    keeps its traceback. Control characters are escaped: messages quote user input."""
    try:
        return int(args.func(args))
    except AmpHlsError as exc:
        print(f"amp-hls: error: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        raise  # the reader left: console() drops what no one reads
    except OSError as exc:  # the system refused a path the command was given
        where = f": {exc.filename}" if exc.filename is not None else ""
        print(f"amp-hls: error: {escape_controls((exc.strerror or str(exc)) + where)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        note = f"; {escape_controls(str(exc))}" if str(exc) else ""
        print(f"amp-hls: interrupted{note}", file=sys.stderr)
        return EXIT_INTERRUPTED


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left


def console() -> int:
    """The ``amp-hls`` console script: ``main``, with output that survives a closed pipe
    (``amp-hls models | head -3``): what no one reads any more is dropped, without a traceback."""
    try:
        status = main()
        sys.stdout.flush()  # a reader that left early shows here, not at interpreter exit
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so Python's own flush at exit finds no pipe either
        return EXIT_BROKEN_PIPE
