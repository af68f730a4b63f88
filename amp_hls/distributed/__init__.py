"""Distributed asynchronous SGD over MPI: rank 0 is the parameter server, ranks 1..N train.

Run it with ``mpiexec -disable-auto-cleanup -n N+1 amp-hls train MODEL --distributed ...`` (the
``mpi`` extra installs mpi4py and the mpich wheel, whose ``mpiexec`` runs as root with no extra
flags). Each rank is a keeper process and the rank itself (``keeper``); docs/distributed.md has the
failure model.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EXIT_INTERRUPTED, AmpHlsError, exit_code
from ..models import ModelSpec
from .keeper import (
    EXIT_WORKER_LOST,
    Lifeline,
    ignore_failure_notices,
    keep_rank,
    launcher_rank,
    release_shared_memory,
)

if TYPE_CHECKING:
    from ..runtime.trainer import TrainConfig

# Fault injection for tests: "RANK:SECONDS" makes that worker raise after so many seconds; N
# makes workers resend every N-th gradient dump (the server must apply it once).
FAIL_ENV = "AMP_HLS_FAIL_WORKER"
DUPLICATE_ENV = "AMP_HLS_DUPLICATE_EVERY"
# "1": gradient-only workers (no local updates between pushes), for side-by-side comparisons
NO_LOCAL_ENV = "AMP_HLS_NO_LOCAL_UPDATES"
# an integer overriding max_unconfirmed (0: unbounded), for side-by-side comparisons
MAX_UNCONFIRMED_ENV = "AMP_HLS_MAX_UNCONFIRMED"


def writes_outputs() -> bool:
    """Whether this process belongs to the rank that writes a job's outputs (``--json``,
    ``--plot``, ``--checkpoint``): the server, rank 0 (or a process outside any MPI launcher)."""
    return launcher_rank() in (0, None)


def max_unconfirmed(n_sync: int) -> int:
    """How many of its dumps a worker may have ahead of the server's weights before it waits:
    room for two sync intervals, and never fewer than 64 (bounded staleness)."""
    return max(2 * n_sync, 64)


def worker_mak(mak: int, workers: int) -> int:
    """Each worker's share of the job's ``mak`` instances in flight (at least one)."""
    return max(1, -(-mak // workers))


@dataclass(frozen=True)
class DistributedOptions:
    """What a distributed run takes besides its model and TrainConfig (``amp-hls train
    --distributed`` fills it from its options of the same names)."""

    n_sync: int = 1
    worker_timeout: float = 30.0
    eval_every_s: float = 10.0
    checkpoint: Path | None = None
    resume: Path | None = None
    warm_start: Path | None = None
    json: Path | None = None
    plot: Path | None = None
    backend: str = "cpu"  # the workers' runtime: cpu (numpy) or native (one thread each)


def run_distributed(entry: ModelSpec, config: TrainConfig, options: DistributedOptions) -> int:
    """Run this process's part of a distributed job; the exit code (docs/distributed.md).

    The process mpiexec starts becomes the keeper of a child running the same command line,
    which is the rank. A rank never lets mpi4py call MPI_Finalize at exit: it calls it itself when
    every peer is known to be alive and finished, and skips it otherwise (its barrier would wait
    for a lost rank forever), so every rank ends however the others do.
    """
    lifeline = Lifeline.take()
    if lifeline is None:
        return keep_rank()
    ignore_failure_notices()
    try:
        import mpi4py
    except ImportError:
        raise AmpHlsError("--distributed needs mpi4py: pip install 'amp-hls[mpi]'") from None
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    finalize = False
    try:
        if comm.Get_size() < 2:
            raise AmpHlsError("--distributed needs at least 2 ranks: mpiexec -n N+1 amp-hls train ...")
        if comm.Get_rank() == 0:
            code, finalize = _serve(comm, entry, config, options, lifeline)
        else:
            code, finalize = _work(comm, entry, config, options, lifeline)
        lifeline.finish(code)
        return code
    finally:
        if finalize:
            MPI.Finalize()
        else:
            release_shared_memory()


def _serve(comm: Any, entry: ModelSpec, config: TrainConfig, options: DistributedOptions,
           lifeline: Lifeline) -> tuple[int, bool]:
    """Rank 0: train, write the results; (exit code, whether MPI_Finalize is safe). A failure
    stops every worker (STOP_FAILED with its exit code), so the job ends with one message."""
    from .protocol import STOP_FAILED, TAG_STOP, Outbox, stop_message
    from .server import ParameterServerRank

    server = None
    try:
        server = ParameterServerRank(
            comm, entry, config, options.n_sync, worker_timeout=options.worker_timeout,
            eval_every_s=options.eval_every_s, checkpoint=options.checkpoint, resume=options.resume,
            warm_start=options.warm_start, lifeline=lifeline,
        )
        summary = server.run()
    except BaseException as exc:
        outbox = Outbox(comm)
        for rank in range(1, comm.Get_size()):
            outbox.send(stop_message(-1, STOP_FAILED, code=exit_code(exc)), dest=rank, tag=TAG_STOP)
        outbox.flush(timeout=1.0)
        if isinstance(exc, KeyboardInterrupt) and options.checkpoint is not None:
            saved = server.saved if server is not None else None
            raise KeyboardInterrupt(
                f"{options.checkpoint} holds the server at {saved[0]} updates (t={saved[1]:.1f}s)"
                if saved else f"no server checkpoint written to {options.checkpoint} yet") from None
        raise
    from ..runtime.report import plot_curves, write_json

    lifeline.beat(60.0)  # writing the results: matplotlib alone may take seconds
    if options.json is not None:
        write_json(summary, options.json)
    if options.plot is not None:
        curve = [(r["wall_s"], r["val_metric"]) for r in summary["history"]]
        plot_curves({f"{summary['workers']} workers, n_sync={options.n_sync}": curve}, options.plot,
                    metric=f"validation {entry.metric}", target=config.target)
    ttt = summary["time_to_target_s"]
    lost = summary["lost_workers"]
    print(
        f"[server] {entry.name}: {summary['workers']} worker(s), n_sync={options.n_sync}: "
        f"test {entry.metric} {summary['test_metric']:.4f}, {summary['updates']} updates in "
        f"{summary['wall_s']:.1f} s, time to target {f'{ttt:.1f} s' if ttt is not None else 'not reached'}, "
        f"staleness mean {summary['staleness']['mean']:.1f}, dropped workers {summary['dropped_workers']}"
        + "".join(f"; worker {w['rank']} lost at t={w['at_s']:.1f}s ({w['why']})" for w in lost),
        flush=True,
    )
    return (EXIT_WORKER_LOST, False) if lost else (0, True)


def _work(comm: Any, entry: ModelSpec, config: TrainConfig, options: DistributedOptions,
          lifeline: Lifeline) -> tuple[int, bool]:
    """Ranks 1..N: train until the server stops us; (exit code, whether MPI_Finalize is safe)."""
    from .worker import Leave, NativeWorkerTrainer, WorkerTrainer

    # --mak is the whole job's instances in flight, split over the workers: each worker's
    # in-flight instances see the others' updates too, so W workers at a single trainer's mak
    # each would multiply the staleness the model was tuned for by W
    config = replace(config, mak=worker_mak(config.mak, comm.Get_size() - 1))
    fail = None
    spec = os.environ.get(FAIL_ENV, "")
    if spec:
        rank, seconds = spec.split(":")
        if int(rank) == comm.Get_rank():
            fail = float(seconds)
    try:
        trainer = NativeWorkerTrainer if options.backend == "native" else WorkerTrainer
        worker = trainer(comm, entry, config, fail_after_s=fail,
                               duplicate_every=int(os.environ.get(DUPLICATE_ENV, "0")),
                               local_updates=os.environ.get(NO_LOCAL_ENV, "") not in ("1", "true", "yes"),
                               max_unconfirmed=int(os.environ.get(MAX_UNCONFIRMED_ENV, max_unconfirmed(options.n_sync))),
                               optimizer_state=options.resume or options.warm_start,
                               server_timeout=options.worker_timeout, lifeline=lifeline)
        peers_lost = worker.work()
    except Leave as leave:
        if leave.message:
            print(f"amp-hls: {leave.message}", file=sys.stderr, flush=True)
        return leave.code, False
    except KeyboardInterrupt:  # SIGINT reaches every rank: the server says what it left
        return EXIT_INTERRUPTED, False
    return 0, peers_lost == 0
