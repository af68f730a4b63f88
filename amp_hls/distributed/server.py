"""Rank 0: the parameter server of distributed asynchronous SGD (GPU A-SGD's design).

It owns the fp32 master weights and the optimizer. Gradient dumps from workers are applied the
moment they arrive, with no barrier; after ``n_sync`` dumps from a worker, that worker gets the
current weights. A worker silent for longer than ``worker_timeout`` (or one a send to which
fails) is dropped and training goes on with the rest; the summary says which and when. The server evaluates on the validation set every ``eval_every_s`` seconds,
stops everyone once the target is reached, and checkpoints (npz) so a restarted server resumes.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Contents, write_checkpoint
from ..errors import AmpHlsError
from ..interrupts import interrupts_deferred
from ..kernels.base import StalenessStats
from ..models import ModelSpec
from ..runtime.optim import MOMENTS, Optimizer
from ..runtime.restore import (
    Shapes,
    param_names,
    read_history,
    read_optimizer_state,
    read_params,
    stored_moments,
)
from ..runtime.trainer import EpochRecord, TrainConfig, Trainer
from .keeper import Lifeline
from .protocol import (
    BYE_COUNTS,
    GRADS_HEADER,
    STOP_DROPPED,
    STOP_FINISHED,
    TAG_ALIVE,
    TAG_BYE,
    TAG_DONE,
    TAG_FINAL,
    TAG_GRADS,
    TAG_STOP,
    TAG_WEIGHTS,
    Outbox,
    ParamLayout,
    heartbeat_s,
    mpi_error,
    stop_message,
)

CHECKPOINT_VERSION = 1
EVAL_PROBE = 250  # validation examples of the quick look during training
IDLE_SLEEP_MAX = 5e-4  # longest nap between polls when no message waits (seconds)
SERVE_EVERY_S = 5e-3  # during a validation, serve the workers this often (seconds)


@dataclass
class WorkerState:
    last_heard: float
    last_sent: float = 0.0  # when the server last sent it anything (heartbeats fill the gaps)
    dumps_since_push: int = 0
    applied: int = 0
    duplicates: int = 0  # dumps received again (a resend): ignored
    late: int = 0  # dumps received after its STOP: not applied
    pushes_due: int = 0  # the first push, then one per n_sync of its dumps applied
    pushes_merged: int = 0  # due while an earlier one still waited: that one carries both
    pushes_sent: int = 0
    reported: dict[str, int] = field(default_factory=dict)  # its own counts, from its BYE
    last_seq: int = -1
    done: bool = False  # its DONE arrived
    bye: bool = False  # its BYE arrived: it sends nothing more
    stop_sent: bool = False
    final_sent: bool = False  # its FINAL went out: the server sends it nothing more
    dropped: bool = False
    lost_at_s: float | None = None  # server wall time when it was dropped
    lost_reason: str = ""
    weights_in_flight: Any = None  # the request of the last WEIGHTS send (one at a time)
    weights_buffer: Any = None
    push_wanted: bool = False  # a push is due but the previous one is still being received
    instances: int = 0
    train_s: float = 0.0  # the worker's own training wall time and CPU time (from its DONE)
    cpu_s: float = 0.0
    waited_s: float = 0.0  # how long it waited for the server to catch up (bounded staleness)


@dataclass
class ServerLog:
    events: list[str] = field(default_factory=list)

    def __call__(self, message: str) -> None:
        line = f"[server] {message}"
        self.events.append(message)
        print(line, flush=True)


class ParameterServerRank:
    def __init__(
        self,
        comm: Any,
        entry: ModelSpec,
        config: TrainConfig,
        n_sync: int,
        worker_timeout: float = 30.0,
        eval_every_s: float = 5.0,
        checkpoint: Path | None = None,
        resume: Path | None = None,
        warm_start: Path | None = None,
        max_wall_s: float = 3600.0,
        lifeline: Lifeline | None = None,
    ):
        self.comm = comm
        self.lifeline = lifeline
        self.outbox = Outbox(comm)
        self.entry = entry
        self.config = config
        self.n_sync = n_sync
        self.worker_timeout = worker_timeout
        self.heartbeat_s = heartbeat_s(worker_timeout)
        self.eval_every_s = eval_every_s
        self.checkpoint = checkpoint
        self.max_wall_s = max_wall_s
        self.log = ServerLog()
        # the evaluator: a CPU trainer whose weights are overwritten with the masters before use
        self.evaluator = Trainer(entry, config)
        # between the validation's engine steps the server keeps serving its workers
        self._serving = False
        self._last_serve = 0.0
        self._serve_cpu_s = 0.0
        evaluation_step = self.evaluator.eval_engine.step

        def step_and_serve() -> list[int]:
            finished = evaluation_step()
            self._alive()
            if self._serving:
                self._serve_between_steps()
            return finished

        self.evaluator.eval_engine.step = step_and_serve  # type: ignore[method-assign]
        self.params = {k.name: dict(k.params) for k in self.evaluator.param_kernels}
        self.optimizer = Optimizer(config.optimizer)
        if warm_start is not None:
            # the optimizer state too: a fresh Adam's first steps are full learning-rate steps
            # in every coordinate, which knock a partly trained model back
            self.params, state = read_warm_start(warm_start, entry.name, shapes_of(self.params), self.optimizer)
            self.log(f"warm start from {warm_start}" + (" (weights and optimizer state)" if state else ""))
        self.layout = ParamLayout.of(self.params)
        self.version = 0  # updates applied, all nodes together
        self.node_versions = dict.fromkeys(self.layout.nodes, 0)  # updates per node
        self.staleness = StalenessStats()
        self.duplicates = 0
        self.history: list[EpochRecord] = []
        self.saved: tuple[int, float] | None = None  # (updates, wall s) of the last checkpoint written
        self.elapsed_before = 0.0
        self.incarnation = int(time.time() * 1000) % (1 << 40)
        self.workers = {
            rank: WorkerState(time.monotonic()) for rank in range(1, comm.Get_size())
        }
        self._next_probe = 0  # where the next round of probes starts
        if resume is not None:
            self._resume(resume)

    # the loop ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        if not self.workers:
            raise AmpHlsError("distributed training needs at least one worker rank (mpiexec -n 2 or more)")
        self.start = time.monotonic()
        self.cpu_start = time.process_time()
        self.eval_cpu_s = 0.0
        for rank, w in self.workers.items():
            w.last_heard = self.start  # silence counts from the first push, not from start-up
            self._push(rank)
        next_eval = self.start + self.eval_every_s
        reached = False
        from mpi4py import MPI

        status = self._status = MPI.Status()
        idle = 0  # polls in a row that found nothing: back off so an idle server leaves the CPU to workers
        while any(not (w.done or w.dropped) for w in self.workers.values()):
            # one message, then the housekeeping: a steady stream of dumps must not starve the
            # evaluation, the retried pushes or the timeouts
            if self._receive_one(status):
                idle = 0
            else:
                idle += 1
            self._housekeeping()
            now = time.monotonic()
            if now >= next_eval:
                reached = self._evaluate()
                next_eval = time.monotonic() + self.eval_every_s
                if reached or self.wall_s > self.max_wall_s:
                    break
            if idle:
                time.sleep(min(1e-4 * idle, IDLE_SLEEP_MAX))
        if not reached:
            reached = self._evaluate()
        self._shutdown()
        return self.summary(reached)

    def _alive(self) -> None:
        """Promise the keeper the next sign of progress within ``worker_timeout``."""
        if self.lifeline is not None:
            self.lifeline.beat(self.worker_timeout)

    def _housekeeping(self) -> None:
        """After every message: retried pushes, heartbeats, and dropping the lost workers."""
        self._alive()
        self._retry_pushes()
        now = time.monotonic()
        for rank in sorted(self.outbox.failed):
            self._drop(rank, "a send to it failed")
        for rank, w in self.workers.items():
            if w.done or w.dropped:
                continue
            if now - w.last_heard > self.worker_timeout:
                self._drop(rank, f"silent for {now - w.last_heard:.1f} s")
        for rank, w in self.workers.items():  # a done worker waits for its FINAL: keep it informed
            if not (w.dropped or w.final_sent) and now - w.last_sent > self.heartbeat_s:
                self._send(rank, np.array([self.incarnation], dtype=np.float64), TAG_ALIVE)

    def _send(self, rank: int, data: np.ndarray, tag: int) -> None:
        self.outbox.send(data, dest=rank, tag=tag)
        self.workers[rank].last_sent = time.monotonic()

    def _drop(self, rank: int, why: str) -> None:
        """Give up on a worker: never probe it again (its half-sent messages cannot be received)
        and tell it so, in case it is alive and merely slow."""
        w = self.workers[rank]
        if w.dropped:
            return
        w.dropped, w.lost_at_s, w.lost_reason = True, self.wall_s, why
        self.outbox.send(stop_message(self.incarnation, STOP_DROPPED), dest=rank, tag=TAG_STOP)
        left = sum(not (x.done or x.dropped) for x in self.workers.values())
        self.log(f"worker {rank} lost at t={w.lost_at_s:.1f}s ({why}): dropped; {left} worker(s) still training")

    @property
    def lost(self) -> list[int]:
        return [r for r, w in self.workers.items() if w.dropped]

    def _stop(self, rank: int) -> None:
        w = self.workers[rank]
        if not w.stop_sent:
            self._send(rank, stop_message(self.incarnation, STOP_FINISHED), TAG_STOP)
            w.stop_sent = True

    def _shutdown(self) -> None:
        """STOP everyone still training, then take what they still send until each says DONE."""
        from mpi4py import MPI

        for rank, w in self.workers.items():
            if not w.dropped:
                self._stop(rank)
        deadline = time.monotonic() + self.worker_timeout
        status = MPI.Status()
        while any(not (w.done or w.dropped) for w in self.workers.values()):
            self._alive()
            if time.monotonic() > deadline:
                for rank, w in self.workers.items():
                    if not (w.done or w.dropped):
                        self._drop(rank, "it never confirmed the stop")
                break
            if not self._receive_one(status):
                time.sleep(1e-4)
        # keep MPI progressing until every worker's sends have completed (its BYE says so):
        # without that a worker can wait on a send the server already received
        deadline = time.monotonic() + self.worker_timeout
        while any(not (w.bye or w.dropped) for w in self.workers.values()) and time.monotonic() < deadline:
            self._alive()
            if not self._receive_one(status):
                time.sleep(1e-4)
        for rank, w in self.workers.items():
            if not (w.bye or w.dropped):
                self._drop(rank, "it never said goodbye")
        final = np.array([self.incarnation, len(self.lost)], dtype=np.float64)
        for rank, w in self.workers.items():
            if not w.dropped:
                self._send(rank, final, TAG_FINAL)
                w.final_sent = True
        self._alive()
        self.outbox.flush(timeout=self.worker_timeout)
        deadline = time.monotonic() + self.worker_timeout
        for w in self.workers.values():  # the last pushes, received before each worker's STOP
            while w.weights_in_flight is not None and not w.dropped and time.monotonic() < deadline:
                try:
                    if w.weights_in_flight.Test():
                        break
                except MPI.Exception:
                    break
                time.sleep(1e-4)

    @property
    def wall_s(self) -> float:
        return self.elapsed_before + time.monotonic() - self.start

    def _receive_one(self, status: Any) -> bool:
        """Handle one waiting message from a live worker (a dropped rank is never probed again:
        its half-sent messages cannot be received). False if none is waiting."""
        from mpi4py import MPI

        ranks = list(self.workers)
        first = self._next_probe % len(ranks)
        for rank in ranks[first:] + ranks[:first]:  # round robin: a busy rank cannot starve the rest
            w = self.workers[rank]
            if not w.dropped and self.comm.Iprobe(source=rank, tag=MPI.ANY_TAG, status=status):
                self._next_probe = ranks.index(rank) + 1
                self._handle(rank, status.Get_tag(), status.Get_count(MPI.DOUBLE))
                return True
        return False

    def _handle(self, rank: int, tag: int, count: int) -> None:
        from mpi4py import MPI

        buf = np.empty(count, dtype=np.float64)
        w = self.workers[rank]
        try:
            self.comm.Recv(buf, source=rank, tag=tag)
        except MPI.Exception as exc:  # the sender died mid-transfer
            self._drop(rank, f"it died while sending: {mpi_error(exc)}")
            return
        w.last_heard = time.monotonic()
        if w.dropped:
            return  # a worker given up on: whatever it still says is not applied
        if tag == TAG_DONE:
            w.done = True
            w.instances = int(buf[1])
            w.train_s, w.cpu_s, w.waited_s = float(buf[2]), float(buf[3]), float(buf[4])
            self.log(f"worker {rank} done ({w.instances} instances)")
            self._stop(rank)  # the reply that lets it leave
            return
        if tag == TAG_BYE:
            w.bye = True
            w.reported = dict(zip(BYE_COUNTS, (int(v) for v in buf[1:])))
            return
        if tag != TAG_GRADS:
            raise AmpHlsError(f"unexpected message tag {tag} from worker {rank}")
        incarnation, seq, node_i, version_used, n_grads, size = (int(v) for v in buf[:GRADS_HEADER])
        if incarnation != self.incarnation or seq <= w.last_seq:
            self.duplicates += 1  # replayed or from an earlier job: never applied twice
            w.duplicates += 1
            return
        w.last_seq = seq
        if w.stop_sent:
            w.late += 1  # training is over: received (so the worker can leave) but not applied
            return
        node = self.layout.nodes[node_i]
        grads = self.layout.unflatten(buf[GRADS_HEADER : GRADS_HEADER + size], node)[node]
        self.params[node] = self.optimizer.step(node, self.params[node], grads)
        self.staleness.record(self.node_versions[node] - version_used)  # in that node's updates
        self.node_versions[node] += 1
        self.version += 1
        w.applied += 1
        w.dumps_since_push += 1
        if w.dumps_since_push >= self.n_sync:
            w.dumps_since_push = 0
            self._push(rank)
        if self.checkpoint is not None and self.version % 500 == 0:
            self.save(self.checkpoint)

    def _push(self, rank: int) -> None:
        """A push to ``rank`` is due: send the current weights, at most one message in flight
        per worker. While the last one is still being received the push waits, and then sends
        the newest weights (a push due meanwhile is merged into it)."""
        w = self.workers[rank]
        w.pushes_due += 1
        if w.push_wanted:
            w.pushes_merged += 1
        w.push_wanted = True
        self._send_weights(rank)

    def _send_weights(self, rank: int) -> None:
        from mpi4py import MPI

        w = self.workers[rank]
        try:
            if w.weights_in_flight is not None and not w.weights_in_flight.Test():
                return
        except MPI.Exception:
            self.outbox.failed.add(rank)  # dropped by the housekeeping
            return
        versions = [self.node_versions[n] for n in self.layout.nodes]
        w.weights_buffer = np.concatenate(
            [[self.incarnation, self.version, w.last_seq], versions, self.layout.flatten(self.params)]
        ).astype(np.float64)
        try:
            w.weights_in_flight = self.comm.Isend(w.weights_buffer, dest=rank, tag=TAG_WEIGHTS)
        except MPI.Exception:
            self.outbox.failed.add(rank)  # dropped by the housekeeping
            return
        w.last_sent = time.monotonic()
        w.pushes_sent += 1
        w.push_wanted = False

    def _retry_pushes(self) -> None:
        for rank, w in self.workers.items():
            if w.push_wanted and not (w.stop_sent or w.dropped):
                self._send_weights(rank)

    def _evaluate(self) -> bool:
        """Validation of a snapshot of the masters: a quick look at ``EVAL_PROBE`` examples, and
        the whole validation set only when the probe says the target may be reached. Between
        the evaluation's engine steps the server goes on serving its workers (dumps applied to
        the live masters, pushes), so a validation never stalls them; the record carries the
        snapshot's time."""
        cpu, served = time.process_time(), self._serve_cpu_s
        self._serving = True
        try:
            return self._validate()
        finally:
            self._serving = False
            self.eval_cpu_s += time.process_time() - cpu - (self._serve_cpu_s - served)

    def _serve_between_steps(self) -> None:
        now = time.monotonic()
        if now - self._last_serve < SERVE_EVERY_S:
            return
        cpu = time.process_time()
        for _ in range(256):  # bounded: the validation must finish even under a flood of dumps
            if not self._receive_one(self._status):
                break
        self._housekeeping()
        self._last_serve = time.monotonic()
        self._serve_cpu_s += time.process_time() - cpu

    def _validate(self) -> bool:
        snapshot_s, snapshot = self.wall_s, dict(self.params)  # an update replaces a node's dict
        for kernel in self.evaluator.param_kernels:
            kernel.set_params(snapshot[kernel.name])
        val_set = self.evaluator.splits.val
        target = self.config.target
        val = self.evaluator.evaluate(val_set[:EVAL_PROBE])
        if target is not None and self.entry.better(val.metric, target) and len(val_set) > EVAL_PROBE:
            val = self.evaluator.evaluate(val_set)
        instances = sum(w.applied for w in self.workers.values())
        record = EpochRecord(len(self.history) + 1, snapshot_s, float("nan"), float("nan"),
                             val.loss, val.metric, instances)
        self.history.append(record)
        reached = target is not None and val.count == len(val_set) and self.entry.better(val.metric, target)
        if reached:  # the result is the model that was validated, not what dumps made of it since
            self.params = snapshot
        if self.checkpoint is not None:  # before the line, so a line seen is a checkpoint written
            self.save(self.checkpoint)
        self.log(f"t={record.wall_s:.1f}s updates={self.version} val_{self.entry.metric}={val.metric:.4f} "
                 f"({val.count} examples)")
        return reached

    def summary(self, reached: bool) -> dict[str, Any]:
        for kernel in self.evaluator.param_kernels:
            kernel.set_params(self.params[kernel.name])
        test = self.evaluator.evaluate(self.evaluator.splits.test)
        target = self.config.target
        ttt = next((r.wall_s for r in self.history if target is not None and self.entry.better(r.val_metric, target)), None)
        metric = self.entry.metric
        return {
            "model": self.entry.name,
            "mode": "distributed-async",
            "workers": len(self.workers),
            "n_sync": self.n_sync,
            "config": self.config.to_json(),
            "metric": metric,
            f"val_{metric}": self.history[-1].val_metric if self.history else None,
            f"test_{metric}": test.metric,
            "test_metric": test.metric,
            "wall_s": self.wall_s,
            "updates": self.version,
            "target": target,
            "reached_target": reached,
            "time_to_target_s": ttt,
            "staleness": {"mean": self.staleness.mean, "max": self.staleness.max, "count": self.staleness.count},
            "duplicates_ignored": self.duplicates,
            "dropped_workers": self.lost,
            "lost_workers": [{"rank": r, "at_s": w.lost_at_s, "why": w.lost_reason}
                             for r, w in self.workers.items() if w.dropped],
            "worker_instances": {str(r): w.instances for r, w in self.workers.items()},
            "worker_train_s": {str(r): w.train_s for r, w in self.workers.items()},
            # per worker, what it says it sent and received, and what the server made of it
            "worker_dumps": {str(r): {**w.reported, "applied": w.applied, "duplicates": w.duplicates,
                                      "late": w.late, "pushes_due": w.pushes_due, "pushes_merged": w.pushes_merged,
                                      "pushes_sent": w.pushes_sent, "push_pending": int(w.push_wanted)}
                             for r, w in self.workers.items()},
            "worker_cpu_s": {str(r): w.cpu_s for r, w in self.workers.items()},
            "worker_waited_s": {str(r): w.waited_s for r, w in self.workers.items()},
            "server_cpu_s": time.process_time() - self.cpu_start,
            "server_eval_cpu_s": self.eval_cpu_s,
            "events": self.log.events,
            "history": [asdict(r) for r in self.history],
        }

    # checkpoints --------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        arrays = {f"param/{n}/{t}": v for n, ts in self.params.items() for t, v in ts.items()}
        arrays.update(self.optimizer.state_arrays())
        meta = {
            "version": CHECKPOINT_VERSION,
            "model": self.entry.name,
            "updates": self.version,
            "node_versions": self.node_versions,
            "optimizer_steps": self.optimizer.steps,
            "wall_s": self.wall_s,
            "history": [asdict(r) for r in self.history],
        }
        with interrupts_deferred():  # so that ``saved`` always names what the file holds
            write_checkpoint(path, arrays, meta)
            self.saved = (self.version, self.wall_s)

    def _resume(self, path: Path) -> None:
        """Continue from a server checkpoint of this model, every part of it checked first."""
        contents = Contents(path)
        meta = contents.meta
        if meta.get("version") != CHECKPOINT_VERSION or meta.get("model") != self.entry.name:
            raise contents.error(f"is not a server checkpoint of {self.entry.name!r} (a server's has version "
                                 f"{CHECKPOINT_VERSION}; use --warm-start for a single-process run's)")
        shapes = shapes_of(self.params)
        params = read_params(contents, shapes)
        opt, steps = read_optimizer_state(contents, self.optimizer.config.kind, shapes)
        contents.only(param_names(shapes) | set(opt))
        node_versions = contents.counters("node_versions", shapes)
        updates = contents.counter("updates")
        if sum(node_versions.values()) != updates:  # each update is one node's
            raise contents.error(f"its node versions add up to {sum(node_versions.values())}, not its {updates} updates")
        wall_s = contents.number("wall_s")
        history = read_history(contents)
        self.params = params  # all checked: now load it
        self.optimizer.load_state(opt, steps)
        self.version, self.node_versions = updates, node_versions
        self.elapsed_before, self.history = wall_s, history
        self.log(f"resumed from {path} at {self.version} updates")


def shapes_of(params: dict[str, dict[str, np.ndarray]]) -> Shapes:
    return {n: {t: v.shape for t, v in ts.items()} for n, ts in params.items()}


def read_warm_start(path: Path, model: str, shapes: Shapes, optimizer: Optimizer
                    ) -> tuple[dict[str, dict[str, np.ndarray]], bool]:
    """The parameters of a CPU trainer's or server's checkpoint of ``model``, checked; its
    optimizer state goes into ``optimizer`` when it is one of the same kind (True then)."""
    contents = Contents(path)
    if contents.meta.get("model") != model:
        raise contents.error(f"is a checkpoint of model {contents.meta.get('model')!r}, not {model!r}")
    params = read_params(contents, shapes)
    config = contents.meta.get("config")
    kind = config.get("optimizer", {}).get("kind") if isinstance(config, dict) and isinstance(
        config.get("optimizer"), dict) else None
    moments = set(MOMENTS[optimizer.config.kind])
    if not moments or stored_moments(contents) != moments or kind not in (None, optimizer.config.kind):
        return params, False
    optimizer.load_state(*read_optimizer_state(contents, optimizer.config.kind, shapes))
    return params, True
