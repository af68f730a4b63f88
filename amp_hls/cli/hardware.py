"""``amp-hls generate | csim | testbench | report | estimate``: the hardware project of a graph."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import api
from ..errors import AmpHlsError
from ..host.profile import format_profile
from ..memories import LUTRAM_DEPTHS
from ..models import ModelSpec
from ..output import check_output_dir, check_output_file
from ..runtime.report import write_json
from .graphs import MODEL_HELP


def add_model_option(p: argparse.ArgumentParser) -> None:
    """The model whose examples a command runs through a project (default: the zoo model of the
    project's graph), and its data."""
    p.add_argument("--model", help=f"{MODEL_HELP}: its training examples are the instances")
    p.add_argument("--data", type=Path, help="--model's data from this file (.jsonl, .csv or .npz)")
    p.add_argument("--dataset-size", help="--model's data set at this size, or 'all'")


def _model(args: argparse.Namespace) -> ModelSpec | None:
    if args.model is None:
        if args.data is not None or args.dataset_size is not None:
            raise AmpHlsError("--data and --dataset-size are the data of --model: give the model too")
        return None
    return api.load_model(args.model, data=args.data, dataset_size=args.dataset_size)


def cmd_generate(args: argparse.Namespace) -> int:
    import json
    import time

    from ..config import load_config

    start = time.perf_counter()
    check_output_dir(args.output, args.force)  # before any work: a directory it may not write into
    config = load_config(args.config) if args.config is not None else None
    # an unknown board or a graph that breaks the IR (names included) fails before anything is written
    options = api.device_options(config, muf=args.muf, cache_slots=args.cache_slots, dump_engine=args.dump_engine,
                                 lutram_depth=args.lutram_depth)
    api.check_flow(args.flow, options)  # what only the rtl flow builds, refused before any work
    lutram_depth = 0 if args.flow == "hls" else args.lutram_depth  # folding for the hls flow keeps block RAM
    options = _sized(args, config, options)  # what the bitstream fixes, for the model's training run
    pins = dict(args.parallelism or [])
    folding = None
    board_given = args.board is not None or (config is not None and "board" in config.device)
    if api.folds(config, args.fold, args.target_rate, board_given):
        from ..cycles.folding import format_folding

        muf_given = args.muf is not None or (config is not None and "muf" in config.training)
        cache_given = args.cache_slots is not None or (config is not None and "cache_slots" in config.device)
        board_name = args.board or (config.device.get("board") if config else None) or api.DEFAULT_BOARD
        fold_muf = options.muf if muf_given else None
        if args.mak is None and not cache_given and options.max_in_flight is not None:
            folding, options = api.fold_fitting(args.model, board_name, options, config=config,
                                                target_rate=args.target_rate, parallelism=pins, muf=fold_muf,
                                                lutram_depth=lutram_depth, lanes=args.flow != "hls")
            if folding.mak_lowered_from is not None:
                print(f"mak {folding.mak_lowered_from} does not fit {board_name} (resource model): lowered to mak "
                      f"{options.max_in_flight} ({options.cache_slots} cache slots), the fastest predicted of those "
                      f"that fit (every mak up to {api.EVERY_MAK_UP_TO}, then halvings of the most)")
        else:
            folding = api.fold_for(args.model, board_name, options=options, config=config,
                                   target_rate=args.target_rate, parallelism=pins, muf=fold_muf,
                                   lutram_depth=lutram_depth, lanes=args.flow != "hls")
        print(format_folding(folding))
    project = api.generate(args.model, args.output, board=args.board, config=config, force=args.force,
                           options=options, flow=args.flow, parallelism=pins, folding=folding,
                           fold=folding is not None)  # decided above
    if project.flow == "hls":
        from ..sim.vitis_bench import write_vitis_testbench

        write_vitis_testbench(project.root)  # tb/amp_tb.cpp: hls.tcl's csim and cosim
    board = project.board
    n = len(project.hls.placement.device_nodes)
    print(f"wrote {project.root} ({project.flow} flow): {n} kernels + boundary for {board.name} ({board.part}) "
          f"in {time.perf_counter() - start:.2f} s; sized for mak {options.max_in_flight}, "
          f"muf {folding.muf if folding else options.muf}, "
          f"{options.cache_slots} cache slots")
    targets = "csim | bitstream | deploy" if project.flow == "rtl" else "csim | ip | cosim | bitstream | deploy"
    print(f"  make -C {project.root} {targets}   -> {project.name}.bit + {project.name}.hwh")
    rtl = json.loads((project.root / "manifest.json").read_text())["rtl"]
    print(f"  rtl: {project.root}/rtl ({rtl['top']}); amp-hls testbench {project.root}" if "top" in rtl else
          f"  rtl: none yet, no RTL kernel for node kind(s) {', '.join(rtl['missing_kinds'])}")
    return 0


def add_fold_options(p: argparse.ArgumentParser) -> None:
    """generate's folding options (docs/board.md, Folding)."""
    p.add_argument("--fold", action=argparse.BooleanOptionalAction, default=None,
                   help="choose each Linear's parallelism, the row-wise kernels' lanes (rtl flow) and the GRADS period for the board with the cycle "
                   "and resource models (default: on with --board or [device] board, or [device] fold in "
                   "--config; --no-fold opts out); a default mak whose tag tables do not fit is lowered (the "
                   "fastest predicted of those that fit); refuses a design that fits at no mak")
    p.add_argument("--target-rate", type=float, metavar="N",
                   help="fold no further than N instances/s (implies --fold)")
    p.add_argument("--parallelism", type=_node_parallelism, action="append", metavar="NODE=P",
                   help="pin a Linear node's MACs per cycle (repeatable; up to its input width, or 2 or 4 "
                   "times it in whole beats for that many outputs a cycle); folding chooses the others")
    p.add_argument("--lutram-depth", type=int, choices=(0, *LUTRAM_DEPTHS), metavar="WORDS",
                   help="put every memory of at most WORDS words in LUT-RAM instead of the block RAM it would "
                   f"fill a quarter ({', '.join(map(str, LUTRAM_DEPTHS))}; 0: none); default: folding tries "
                   "them when block RAM stops it, and keeps the fastest")


def _node_parallelism(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: use NODE=P, e.g. fc0=8")
    return name, int(value)


def _sized(args: argparse.Namespace, config, options):  # type: ignore[no-untyped-def]
    """``options`` sized by the rule ``cache_slots >= mak x messages per instance`` (host.settings):
    muf and mak from the model's training defaults unless given, the messages per instance
    counted on its data (a graph file without data: the graph's own bound)."""
    from ..host.settings import generation_options

    try:
        spec = api.load_model(args.model)
    except AmpHlsError:  # a graph file: no data, no defaults
        spec = None
    muf_given = args.muf is not None or (config is not None and "muf" in config.training)
    cache_given = args.cache_slots is not None or (config is not None and "cache_slots" in config.device)
    return generation_options(spec, api.resolve_graph(args.model), options, muf_given=muf_given,
                              cache_given=cache_given, mak=args.mak)


def cmd_deploy(args: argparse.Namespace) -> int:
    from ..codegen.deploy import deploy

    folder = deploy(args.project, args.output, model=args.model, data=args.data)
    print(f"wrote {folder.root}: {', '.join(folder.files)}")
    print(f"  copy it onto the board, then there: {folder.command}   (steps: {folder.root / 'README.md'})")
    return 0


def cmd_testbench(args: argparse.Namespace) -> int:
    from ..sim.project_bench import write_testbench

    files = write_testbench(args.project, instances=args.instances, mak=args.mak, seed=args.seed, model=_model(args))
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

    check_output_file(args.json, "--json")  # before the work (an RTL simulation, maybe)
    if args.profile and args.no_measure:
        raise AmpHlsError("--profile measures on the RTL simulation: drop --no-measure")
    model = _model(args)
    report, _ = api.report(args.project, board=args.board, instances=args.instances, seed=args.seed,
                           model=model, measure=False)
    print(rep.format_report(report))
    measured: rep.Measured | str | None = None
    streamed: rep.Measured | None = None
    if not args.no_measure:
        why = rep.rtlsim_unavailable(args.project)
        if why is None:
            print(f"measuring: {args.instances} instances through the RTL simulation (builds it once), the host "
                  "in turns, then streaming ...", flush=True)
        measured = why or rep.measure_project(args.project, args.instances, args.seed, model,
                                              profile=args.profile)  # a failure exits 2
        print(rep.format_measured(report, measured))
        if isinstance(measured, rep.Measured) and args.profile:
            print(format_profile(measured.streams, measured.cycles))
        if why is None:
            streamed = rep.measure_project(args.project, args.instances, args.seed, model, streaming=True)
            print(rep.format_measured(report, streamed))
    if args.json is not None:
        write_json(api.report_json(report, measured, streamed), args.json)
        print(f"wrote {args.json}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    from ..codegen.estimate import format_fit, misfits

    check_output_file(args.json, "--json")  # before the work (a Yosys synthesis)
    est, board = api.estimate(args.project, board=args.board, timeout=args.timeout)
    print(format_fit(est, board))
    if args.json is not None:
        write_json(api.estimate_json(est, board), args.json)
        print(f"wrote {args.json}")
    over = misfits(est, board)
    if over:
        print(f"amp-hls: error: {est.top} does not fit {board.name}: {'; '.join(over)}", file=sys.stderr)
        return 1
    return 0
