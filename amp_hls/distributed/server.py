"""Rank 0: the parameter server of distributed asynchronous SGD (GPU A-SGD's design).

It owns the fp32 master weights and the optimizer. Gradient dumps from workers are applied the
moment they arrive, with no barrier; after ``n_sync`` dumps from a worker, that worker gets the
current weights. A worker silent for longer than ``worker_timeout`` is dropped and training goes
on with the rest. The server evaluates on the validation set every ``eval_every_s`` seconds,
stops everyone once the target is reached, and checkpoints (npz) so a restarted server resumes.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AmpHlsError
from ..kernels.base import StalenessStats
from ..models import ModelEntry
from ..runtime.optim import Optimizer
from ..runtime.trainer import EpochRecord, TrainConfig, Trainer
from .protocol import (
    GRADS_HEADER,
    TAG_BYE,
    TAG_DONE,
    TAG_GRADS,
    TAG_STOP,
    TAG_WEIGHTS,
    Outbox,
    ParamLayout,
)

CHECKPOINT_VERSION = 1
EVAL_PROBE = 250  # validation examples of the quick look during training
IDLE_SLEEP_MAX = 5e-4  # longest nap between polls when no message waits (seconds)
SERVE_EVERY_S = 5e-3  # during a validation, serve the workers this often (seconds)


@dataclass
class WorkerState:
    last_heard: float
    dumps_since_push: int = 0
    applied: int = 0
    last_seq: int = -1
    done: bool = False  # its DONE arrived
    bye: bool = False  # its BYE arrived: it sends nothing more
    stop_sent: bool = False
    dropped: bool = False
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
        entry: ModelEntry,
        config: TrainConfig,
        n_sync: int,
        worker_timeout: float = 30.0,
        eval_every_s: float = 5.0,
        checkpoint: Path | None = None,
        resume: Path | None = None,
        warm_start: Path | None = None,
        max_wall_s: float = 3600.0,
    ):
        self.comm = comm
        self.outbox = Outbox(comm)
        self.entry = entry
        self.config = config
        self.n_sync = n_sync
        self.worker_timeout = worker_timeout
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
            if self._serving:
                self._serve_between_steps()
            return finished

        self.evaluator.eval_engine.step = step_and_serve  # type: ignore[method-assign]
        self.params = {k.name: dict(k.params) for k in self.evaluator.param_kernels}
        self.optimizer = Optimizer(config.optimizer)
        if warm_start is not None:
            self.params = _load_params(warm_start, self.params)
            # the optimizer state too: a fresh Adam's first steps are full learning-rate steps
            # in every coordinate, which knock a partly trained model back
            with_state = load_optimizer_state(warm_start, self.optimizer)
            self.log(f"warm start from {warm_start}" + (" (weights and optimizer state)" if with_state else ""))
        self.layout = ParamLayout.of(self.params)
        self.version = 0  # updates applied, all nodes together
        self.node_versions = dict.fromkeys(self.layout.nodes, 0)  # updates per node
        self.staleness = StalenessStats()
        self.duplicates = 0
        self.history: list[EpochRecord] = []
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
        for rank in self.workers:
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
            self._retry_pushes()
            now = time.monotonic()
            for rank, w in self.workers.items():
                if not (w.done or w.dropped) and now - w.last_heard > self.worker_timeout:
                    w.dropped = True
                    self.log(f"worker {rank} silent for {now - w.last_heard:.1f} s: dropped; "
                             f"continuing with {sum(not (x.done or x.dropped) for x in self.workers.values())} worker(s)")
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

    def _stop(self, rank: int) -> None:
        w = self.workers[rank]
        if not w.stop_sent:
            self.outbox.send(np.array([self.incarnation], dtype=np.float64), dest=rank, tag=TAG_STOP)
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
            if time.monotonic() > deadline:
                for rank, w in self.workers.items():
                    if not (w.done or w.dropped):
                        w.dropped = True
                        self.log(f"worker {rank} never confirmed the stop: dropped")
                break
            if not self._receive_one(status):
                time.sleep(1e-4)
        # keep MPI progressing until every worker's sends have completed (its BYE says so):
        # without that a worker can wait on a send the server already received
        deadline = time.monotonic() + self.worker_timeout
        while any(not (w.bye or w.dropped) for w in self.workers.values()) and time.monotonic() < deadline:
            if not self._receive_one(status):
                time.sleep(1e-4)
        self.outbox.flush(timeout=self.worker_timeout)
        for w in self.workers.values():
            if w.weights_in_flight is not None and not w.dropped:
                w.weights_in_flight.Wait()

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
            if not w.dropped:
                w.dropped = True
                self.log(f"worker {rank} failed while sending ({exc.Get_error_string().splitlines()[0]}): dropped")
            return
        w.last_heard = time.monotonic()
        if w.dropped:
            return  # a worker given up on: whatever it still says is not applied
        if tag == TAG_DONE:
            w.done = True
            w.instances = int(buf[1])
            if count >= 5:
                w.train_s, w.cpu_s, w.waited_s = float(buf[2]), float(buf[3]), float(buf[4])
            self.log(f"worker {rank} done ({w.instances} instances)")
            self._stop(rank)  # the reply that lets it leave
            return
        if tag == TAG_BYE:
            w.bye = True
            return
        if tag != TAG_GRADS:
            raise AmpHlsError(f"unexpected message tag {tag} from worker {rank}")
        if w.stop_sent:
            return  # training is over: late dumps are received (so the worker can leave) but not applied
        incarnation, seq, node_i, version_used, n_grads, size = (int(v) for v in buf[:GRADS_HEADER])
        if incarnation != self.incarnation or seq <= w.last_seq:
            self.duplicates += 1  # replayed or from an earlier job: never applied twice
            return
        w.last_seq = seq
        node = self.layout.nodes[node_i]
        grads = self.layout.unflatten(buf[GRADS_HEADER : GRADS_HEADER + size], node)[node]
        self.params[node] = self.optimizer.step(node, self.params[node], grads)
        self.staleness.record(self.node_versions[node] - version_used)  # in that node's updates
        self.node_versions[node] += 1
        self.version += 1
        w.applied += 1
        w.dumps_since_push += 1
        if w.dumps_since_push >= self.n_sync and not w.stop_sent:
            self._push(rank)
        if self.checkpoint is not None and self.version % 500 == 0:
            self.save(self.checkpoint)

    def _push(self, rank: int) -> None:
        """Send ``rank`` the current weights, at most one message in flight per worker: while
        the last one is still being received, the push waits and then sends the newest."""
        w = self.workers[rank]
        w.dumps_since_push = 0
        if w.weights_in_flight is not None and not w.weights_in_flight.Test():
            w.push_wanted = True
            return
        versions = [self.node_versions[n] for n in self.layout.nodes]
        w.weights_buffer = np.concatenate(
            [[self.incarnation, self.version, w.last_seq], versions, self.layout.flatten(self.params)]
        ).astype(np.float64)
        w.weights_in_flight = self.comm.Isend(w.weights_buffer, dest=rank, tag=TAG_WEIGHTS)
        w.push_wanted = False

    def _retry_pushes(self) -> None:
        for rank, w in self.workers.items():
            if w.push_wanted and not (w.stop_sent or w.dropped):
                self._push(rank)

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
        self._retry_pushes()
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
        self.log(f"t={record.wall_s:.1f}s updates={self.version} val_{self.entry.metric}={val.metric:.4f} "
                 f"({val.count} examples)")
        reached = target is not None and val.count == len(val_set) and self.entry.better(val.metric, target)
        if reached:  # the result is the model that was validated, not what dumps made of it since
            self.params = snapshot
        if self.checkpoint is not None:
            self.save(self.checkpoint)
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
            "dropped_workers": [r for r, w in self.workers.items() if w.dropped],
            "worker_instances": {str(r): w.instances for r, w in self.workers.items()},
            "worker_train_s": {str(r): w.train_s for r, w in self.workers.items()},
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
        arrays["meta"] = np.array(json.dumps(meta))
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(path)

    def _resume(self, path: Path) -> None:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop("meta")))
        if meta.get("version") != CHECKPOINT_VERSION or meta.get("model") != self.entry.name:
            raise AmpHlsError(f"{path} is not a server checkpoint of {self.entry.name!r}")
        self.params = {n: {t: arrays[f"param/{n}/{t}"] for t in ts} for n, ts in self.params.items()}
        self.optimizer.load_state({k: v for k, v in arrays.items() if k.startswith("opt/")}, meta["optimizer_steps"])
        self.version = meta["updates"]
        self.node_versions = {n: int(v) for n, v in meta["node_versions"].items()}
        self.elapsed_before = meta["wall_s"]
        self.history = [EpochRecord(**r) for r in meta["history"]]
        self.log(f"resumed from {path} at {self.version} updates")


def load_optimizer_state(path: Path, optimizer: Optimizer) -> bool:
    """Load the optimizer state (``opt/<node>/<key>`` arrays, steps in the metadata) of a CPU
    trainer or server checkpoint into ``optimizer``, if it has one for the same kind of
    optimizer; True if it did."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.array(data[k]) for k in data.files if k.startswith("opt/")}
            meta = json.loads(str(data["meta"])) if "meta" in data.files else {}
    except (OSError, KeyError, ValueError) as exc:
        raise AmpHlsError(f"cannot read optimizer state from {path}: {exc}") from None
    steps = meta.get("optimizer_steps") if isinstance(meta, dict) else None
    kind = ((meta.get("config") or {}).get("optimizer") or {}).get("kind")
    suffixes = {k.rsplit(".", 1)[-1] for k in arrays}
    expected = {"adam": {"m", "v"}, "momentum": {"v"}, "sgd": set()}[optimizer.config.kind]
    if not arrays or not isinstance(steps, dict) or suffixes != expected or kind not in (None, optimizer.config.kind):
        return False
    optimizer.load_state(arrays, {str(n): int(t) for n, t in steps.items()})
    return True


def _load_params(path: Path, like: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """Parameters from a CPU trainer or server checkpoint (``param/<node>/<tensor>`` arrays)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {n: {t: np.array(data[f"param/{n}/{t}"]) for t in ts} for n, ts in like.items()}
    except (OSError, KeyError, ValueError) as exc:
        raise AmpHlsError(f"cannot warm-start from {path}: {exc}") from None
