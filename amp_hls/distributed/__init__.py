"""Distributed asynchronous SGD over MPI: rank 0 is the parameter server, ranks 1..N train.

Run it with ``mpiexec -n N+1 amp-hls train MODEL --distributed ...`` (the ``mpi`` extra installs
mpi4py and the mpich wheel, whose ``mpiexec`` runs as root with no extra flags).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import AmpHlsError
from ..models import ModelEntry

if TYPE_CHECKING:
    from ..runtime.trainer import TrainConfig

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


def run_distributed(entry: ModelEntry, config: TrainConfig, options: DistributedOptions) -> int:
    try:
        from mpi4py import MPI
    except ImportError:
        raise AmpHlsError("--distributed needs mpi4py: pip install 'amp-hls[mpi]'") from None
    from .server import ParameterServerRank
    from .worker import WorkerTrainer

    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise AmpHlsError("--distributed needs at least 2 ranks: mpiexec -n N+1 amp-hls train ...")
    if comm.Get_rank() == 0:
        server = ParameterServerRank(
            comm, entry, config, options.n_sync, worker_timeout=options.worker_timeout,
            eval_every_s=options.eval_every_s, checkpoint=options.checkpoint, resume=options.resume,
            warm_start=options.warm_start,
        )
        summary = server.run()
        from ..runtime.report import plot_curves, write_json

        if options.json is not None:
            write_json(summary, options.json)
        if options.plot is not None:
            curve = [(r["wall_s"], r["val_metric"]) for r in summary["history"]]
            plot_curves({f"{summary['workers']} workers, n_sync={options.n_sync}": curve}, options.plot,
                        metric=f"validation {entry.metric}", target=config.target)
        ttt = summary["time_to_target_s"]
        print(
            f"[server] {entry.name}: {summary['workers']} worker(s), n_sync={options.n_sync}: "
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
                           max_unconfirmed=int(os.environ.get(MAX_UNCONFIRMED_ENV, max_unconfirmed(options.n_sync))),
                           optimizer_state=options.resume or options.warm_start)
    worker.work()
    if os.environ.get(FAIL_ENV):
        sys.stdout.flush()
        os._exit(0)  # a rank was lost on purpose: skip MPI_Finalize, which would wait for it
    return 0
