"""``amp-hls generate | csim | testbench | report | estimate``: the hardware project of a graph."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .graphs import resolve_graph


def cmd_generate(args: argparse.Namespace) -> int:
    import json
    import time

    from ..codegen.boards import load_board
    from ..codegen.project import generate_project
    from ..design import DeviceOptions

    start = time.perf_counter()
    board = load_board(args.board)  # an unknown board fails before anything is written
    graph = resolve_graph(args.model)  # so does a graph that breaks the IR (names included)
    options = DeviceOptions(muf=args.muf, cache_slots=args.cache_slots)
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
    from ..sim.project_bench import write_testbench

    files = write_testbench(args.project, instances=args.instances, mak=args.mak, seed=args.seed)
    print(f"wrote {', '.join(str(f) for f in files)}")
    print(f"  pytest {Path(args.project) / 'tb'}   (Verilator + cocotb: amp_top against the numpy device model)")
    return 0


def cmd_csim(args: argparse.Namespace) -> int:
    from ..codegen.project import open_project
    from ..host.csim import CsimDevice, build_csim

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
    from ..cycles import report as rep

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
    from ..codegen.estimate import estimate, family, format_fit, misfits, resolve_board
    from ..codegen.project import project_rtl

    sources, top, generated_for = project_rtl(args.project)
    board = resolve_board(args.board or generated_for or "pynq-z2")
    est = estimate(sources, top, family(board), timeout=args.timeout)
    print(format_fit(est, board))
    over = misfits(est, board)
    if over:
        print(f"amp-hls: error: {top} does not fit {board.name}: {'; '.join(over)}", file=sys.stderr)
        return 1
    return 0
