"""Distributed asynchronous SGD over MPI: rank 0 is the parameter server, ranks 1..N train.

Run it with ``mpiexec -n N+1 amp-hls train MODEL --distributed ...`` (the ``mpi`` extra installs
mpi4py and the mpich wheel, whose ``mpiexec`` runs as root with no extra flags).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from ..errors import AmpHlsError
from ..models import MODELS

# Fault injection for tests: "RANK:SECONDS" makes that worker crash; N makes workers resend
# every N-th gradient dump (the server must apply it once).
FAIL_ENV = "AMP_HLS_FAIL_WORKER"
DUPLICATE_ENV = "AMP_HLS_DUPLICATE_EVERY"
# "1": gradient-only workers (no local updates between pushes), for side-by-side comparisons
NO_LOCAL_ENV = "AMP_HLS_NO_LOCAL_UPDATES"
# an integer overriding max_unconfirmed (0: unbounded), for side-by-side comparisons
MAX_UNCONFIRMED_ENV = "AMP_HLS_MAX_UNCONFIRMED"


def max_unconfirmed(n_sync: int) -> int:
    """How many of its dumps a worker may have ahead of the server's weights before it waits:
    room for two sync intervals, and never fewer than 64 (bounded staleness)."""
    return max(2 * n_sync, 64)


def worker_mak(mak: int, workers: int) -> int:
    """Each worker's share of the job's ``mak`` instances in flight (at least one)."""
    return max(1, -(-mak // workers))


def run_distributed(args: argparse.Namespace) -> int:
    try:
        from mpi4py import MPI
    except ImportError:
        raise AmpHlsError("--distributed needs mpi4py: pip install 'amp-hls[mpi]'") from None
    from ..runtime.train_cli import config_from_args
    from .server import ParameterServerRank
    from .worker import WorkerTrainer

    comm = MPI.COMM_WORLD
    entry = MODELS[args.model]
    config = config_from_args(args)
    if comm.Get_size() < 2:
        raise AmpHlsError("--distributed needs at least 2 ranks: mpiexec -n N+1 amp-hls train ...")
    if comm.Get_rank() == 0:
        server = ParameterServerRank(
            comm, entry, config, args.n_sync, worker_timeout=args.worker_timeout,
            eval_every_s=args.eval_every, checkpoint=args.checkpoint, resume=args.resume,
            warm_start=args.warm_start,
        )
        summary = server.run()
        from ..runtime.report import plot_curves, write_json

        if args.json is not None:
            write_json(summary, args.json)
        if args.plot is not None:
            curve = [(r["wall_s"], r["val_metric"]) for r in summary["history"]]
            plot_curves({f"{summary['workers']} workers, n_sync={args.n_sync}": curve}, args.plot,
                        metric=f"validation {entry.metric}", target=config.target)
        ttt = summary["time_to_target_s"]
        print(
            f"[server] {entry.name}: {summary['workers']} worker(s), n_sync={args.n_sync}: "
            f"test {entry.metric} {summary['test_metric']:.4f}, {summary['updates']} updates in "
            f"{summary['wall_s']:.1f} s, time to target {f'{ttt:.1f} s' if ttt is not None else 'not reached'}, "
            f"staleness mean {summary['staleness']['mean']:.1f}, dropped workers {summary['dropped_workers']}",
            flush=True,
        )
        if summary["dropped_workers"]:
            # MPI_Finalize would wait for the lost rank forever; the results are written, so leave.
            sys.stdout.flush()
            os._exit(0)
        return 0
    # --mak is the whole job's instances in flight, split over the workers: each worker's
    # in-flight instances see the others' updates too, so W workers at a single trainer's mak
    # each would multiply the staleness the model was tuned for by W
    config = replace(config, mak=worker_mak(config.mak, comm.Get_size() - 1))
    die = None
    spec = os.environ.get(FAIL_ENV, "")
    if spec:
        rank, seconds = spec.split(":")
        if int(rank) == comm.Get_rank():
            die = float(seconds)
    worker = WorkerTrainer(comm, entry, config, die_after_s=die,
                           duplicate_every=int(os.environ.get(DUPLICATE_ENV, "0")),
                           local_updates=os.environ.get(NO_LOCAL_ENV, "") not in ("1", "true", "yes"),
                           max_unconfirmed=int(os.environ.get(MAX_UNCONFIRMED_ENV, max_unconfirmed(args.n_sync))),
                           optimizer_state=args.resume or args.warm_start)
    worker.work()
    if os.environ.get(FAIL_ENV):
        sys.stdout.flush()
        os._exit(0)  # a rank was lost on purpose: skip MPI_Finalize, which would wait for it
    return 0
