"""Ranks 1..N: workers that run AMP on their own shard and the server's weights.

A worker is the CPU trainer with one change: when a node has gathered ``muf`` gradients it
sends their mean to the server, and it installs whatever weights the server has sent since
(checked without blocking). The server decides when a worker gets weights (every ``n_sync`` of
its dumps), so no worker ever waits on another.

Between two pushes the worker also applies each update to its own copy with its own optimizer
(GPU A-SGD's clients train locally between syncs), so its weights keep moving instead of
freezing for ``n_sync`` dumps. It keeps the change each local update made until the server
says (in the WEIGHTS header) that it has applied that dump; installing the server's weights
then re-applies the changes of the dumps the server has not seen yet, so the worker never
drops back to weights older than its own updates. With one worker this is the single-process
trainer's trajectory; with several, each worker is the server's state plus its own
not-yet-applied updates. ``local_updates=False`` (or ``AMP_HLS_NO_LOCAL_UPDATES=1``) restores
gradient-only workers whose weights change only when the server pushes.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from ..datasets import Splits
from ..kernels import ParamKernel
from ..models import ModelSpec
from ..native import NativeTrainer
from ..runtime.trainer import TrainConfig, Trainer
from . import FAIL_ENV
from .keeper import EXIT_SERVER_LOST, EXIT_WORKER_LOST, Lifeline
from .protocol import (
    STOP_DROPPED,
    STOP_FAILED,
    TAG_BYE,
    TAG_DONE,
    TAG_FINAL,
    TAG_GRADS,
    TAG_STOP,
    TAG_WEIGHTS,
    WEIGHTS_HEADER,
    Outbox,
    ParamLayout,
    mpi_error,
)
from .server import read_warm_start, shapes_of


class _Stopped(Exception):
    """The server said stop (training is over)."""


class Leave(Exception):
    """The worker leaves now, without the goodbye: exit with ``code``, saying ``message``
    (None: quietly, because the server has said why)."""

    def __init__(self, code: int, message: str | None = None):
        super().__init__(message or f"leaving with exit code {code}")
        self.code = code
        self.message = message


class WorkerTrainer(Trainer):
    backend = "cpu"

    def __init__(
        self,
        comm: Any,
        entry: ModelSpec,
        config: TrainConfig,
        first_weights_timeout: float = 60.0,
        fail_after_s: float | None = None,
        duplicate_every: int = 0,
        local_updates: bool = True,
        max_unconfirmed: int = 0,
        optimizer_state: Path | None = None,
        server_timeout: float = 30.0,
        lifeline: Lifeline | None = None,
    ):
        rank, size = comm.Get_rank(), comm.Get_size()
        full = entry.splits(config.seed)
        shard = Splits(full.name, full.train[rank - 1 :: size - 1], full.val[:1], full.test[:1], full.description)
        super().__init__(entry, config, shard)
        self.comm = comm
        self.outbox = Outbox(comm)
        self.rank = rank
        self.layout = ParamLayout.of({k.name: k.params for k in self.param_kernels})
        self.seq = 0
        self.incarnation = -1
        self.stopped = False
        self.peers_lost: int | None = None  # from the server's FINAL
        self.server_version = 0
        self.confirmed = -1  # the last of our dumps the server's newest weights include
        # bounded staleness: with more than this many dumps not yet in the server's weights the
        # worker waits (sleeping, so an oversubscribed machine gives the server the CPU)
        self.max_unconfirmed = max_unconfirmed
        self.waited_s = 0.0
        self.local_updates = local_updates
        # a server silent this long is lost (it says ALIVE at least every heartbeat_s)
        self.server_timeout = server_timeout
        self.lifeline = lifeline
        self.last_heard = time.monotonic()
        # (seq, node, change) of local updates the server has not yet confirmed applying
        self.unconfirmed: deque[tuple[int, str, dict[str, np.ndarray]]] = deque()
        # fault injection for tests: this worker resends every n-th dump, or raises after so many
        # seconds (then it leaves as any worker whose code raises does)
        self.duplicate_every = duplicate_every
        self.resent = 0
        self.weights_received = 0
        self.fail_at = None if fail_after_s is None else time.monotonic() + fail_after_s
        deadline = time.monotonic() + first_weights_timeout
        while not self._poll():
            if time.monotonic() > deadline:
                raise Leave(EXIT_SERVER_LOST, f"worker {rank}: no weights from the server (rank 0) within "
                            f"{first_weights_timeout:g} s: it is lost or still loading its data; leaving")
            time.sleep(1e-3)
        if optimizer_state is not None:  # a warm start or a resumed server: Adam goes on from there
            # the server has read the file: an error here is this worker's own (another host's copy)
            params = {k.name: k.params for k in self.param_kernels}
            read_warm_start(optimizer_state, entry.name, shapes_of(params), self.optimizer)

    def _apply(self, kernel: ParamKernel) -> None:
        """Send the mean gradient to the server rather than stepping locally."""
        mean = {k: g / kernel.n_grads for k, g in kernel.grads_as_float().items()}
        node_i = self.layout.nodes.index(kernel.name)
        payload = self.layout.flatten({kernel.name: mean}, kernel.name)
        header = [self.incarnation, self.seq, node_i, kernel.version, kernel.n_grads, payload.size]
        message = np.concatenate([header, payload])
        self.outbox.send(message, dest=0, tag=TAG_GRADS)
        if self.duplicate_every and self.seq % self.duplicate_every == 0:
            self.outbox.send(message, dest=0, tag=TAG_GRADS)  # fault injection: a resent dump
            self.resent += 1
        if self.local_updates:
            old = kernel.params
            new = self.optimizer.step(kernel.name, old, mean)
            self.unconfirmed.append((self.seq, kernel.name, {k: new[k] - old[k] for k in old}))
            kernel.set_params(new)  # version + 1: one more of its own updates in these weights
        self.seq += 1
        kernel.zero_grads()
        if self.fail_at is not None and time.monotonic() > self.fail_at:
            raise RuntimeError(f"worker {self.rank}: injected fault ({FAIL_ENV})")
        self._poll()
        if self.max_unconfirmed and self.seq - 1 - self.confirmed > self.max_unconfirmed:
            self._wait_for_server()
        if self.stopped:
            raise _Stopped

    def _wait_for_server(self, timeout: float = 60.0) -> None:
        """Let the server catch up with our dumps (or stop us); give up waiting after ``timeout``."""
        start = time.monotonic()
        while (not self.stopped and self.seq - 1 - self.confirmed > self.max_unconfirmed
               and time.monotonic() - start < timeout):
            if not self._poll():
                time.sleep(2e-4)
        self.waited_s += time.monotonic() - start

    def _poll(self) -> bool:
        """Install the newest weights the server sent (older ones are superseded); notice a stop,
        and leave (``Leave``) when the server, once heard, has been silent for
        ``server_timeout``. True if weights arrived."""
        from mpi4py import MPI

        if self.lifeline is not None:
            self.lifeline.beat(self.server_timeout)
        newest = None
        status = MPI.Status()
        try:
            while self.comm.Iprobe(source=0, tag=MPI.ANY_TAG, status=status):
                buf = np.empty(status.Get_count(MPI.DOUBLE), dtype=np.float64)
                self.comm.Recv(buf, source=0, tag=status.Get_tag())
                self.last_heard = time.monotonic()
                if status.Get_tag() == TAG_STOP:
                    self._stop(buf)
                    break
                if status.Get_tag() == TAG_WEIGHTS:
                    newest = buf
                    self.weights_received += 1
                elif status.Get_tag() == TAG_FINAL:
                    self.peers_lost = int(buf[1])
        except MPI.Exception as exc:
            raise Leave(EXIT_SERVER_LOST, f"worker {self.rank}: the server (rank 0) is unreachable "
                        f"({mpi_error(exc)}): leaving") from None
        now = time.monotonic()
        heard = self.incarnation >= 0 or newest is not None  # before the first weights it may be loading
        if heard and now - self.last_heard > self.server_timeout:
            raise Leave(EXIT_SERVER_LOST, f"worker {self.rank}: no word from the server (rank 0) for "
                        f"{now - self.last_heard:.1f} s: it is lost; leaving")
        if newest is None:
            return False
        incarnation, self.server_version, confirmed = (int(v) for v in newest[:WEIGHTS_HEADER])
        if incarnation != self.incarnation:
            self.unconfirmed.clear()  # a new server job: nothing of ours is in its weights
        self.incarnation, self.confirmed = incarnation, confirmed
        while self.unconfirmed and self.unconfirmed[0][0] <= confirmed:
            self.unconfirmed.popleft()  # already in the server's weights
        n_nodes = len(self.layout.nodes)
        versions = dict(zip(self.layout.nodes, newest[WEIGHTS_HEADER : WEIGHTS_HEADER + n_nodes].astype(int)))
        params = self.layout.unflatten(newest[WEIGHTS_HEADER + n_nodes :])
        ahead = dict.fromkeys(versions, 0)
        for _, node, change in self.unconfirmed:  # our updates the server has not applied yet
            params[node] = {k: v + change[k] for k, v in params[node].items()}
            ahead[node] += 1
        for kernel in self.param_kernels:
            kernel.set_params(params[kernel.name])
            # staleness counts that node's updates: the server's, plus our own not yet there
            kernel.version = int(versions[kernel.name]) + ahead[kernel.name]
        return True

    def _stop(self, message: np.ndarray) -> None:
        """A STOP: training is over (``_Stopped`` follows), or leave now."""
        reason, code = (int(v) for v in message[1:3])
        if reason == STOP_DROPPED:
            raise Leave(EXIT_WORKER_LOST, f"worker {self.rank}: the server dropped it (it was silent "
                        "too long, or a send to it failed): leaving")
        if reason == STOP_FAILED:
            raise Leave(code)  # the server failed and said why
        self.stopped = True

    def work(self, timeout: float = 60.0) -> int:
        """Train the shard for ``epochs`` (or until stopped), then leave cleanly: say DONE, wait
        for the server's STOP, and let the last sends drain (the server keeps receiving).
        Returns how many peers the server lost (its FINAL): MPI_Finalize would wait for them."""
        finished = 0  # instances completed, counting the epoch a STOP cut short

        def count(n: int) -> None:
            nonlocal finished
            finished += n

        start, cpu = time.monotonic(), time.process_time()
        try:
            while self.epoch < self.config.epochs and not self.stopped:
                self.train_epoch(count)
        except _Stopped:
            pass
        done = np.array([self.incarnation, finished, time.monotonic() - start,
                         time.process_time() - cpu, self.waited_s], dtype=np.float64)
        self.outbox.send(done, dest=0, tag=TAG_DONE)
        deadline = time.monotonic() + timeout
        while not self.stopped and time.monotonic() < deadline:
            self._poll()
            time.sleep(1e-3)
        # Our sends may complete only as the server's MPI makes progress, so the server keeps
        # receiving until our BYE, which follows the last of them.
        while not self.outbox.flush(timeout=0.05) and time.monotonic() < deadline:
            self._poll()
        bye = [self.incarnation, self.seq, self.resent, self.weights_received]  # protocol.BYE_COUNTS
        self.outbox.send(np.array(bye, dtype=np.float64), dest=0, tag=TAG_BYE)
        self.outbox.flush(timeout=5.0)
        while self.peers_lost is None:  # the others may still be training: the server says ALIVE
            self._poll()
            time.sleep(1e-2)
        return self.peers_lost


class NativeWorkerTrainer(WorkerTrainer, NativeTrainer):
    """A worker on the native runtime (``--distributed --backend native``), on one thread: the
    native engine trains the shard and hands each update it would make to ``_apply``, as the
    cpu worker's engine does (the numpy mirror kernel takes the node's gradients first, the
    native engine its new weights after); weights from the server go to the native engine as
    they arrive. The mirror's weights are the native ones at every update: only these two
    paths change them."""

    backend = "native"

    def __init__(self, comm: Any, entry: ModelSpec, config: TrainConfig, **kw: Any):
        super().__init__(comm, entry, config, **kw)
        self.run.set_update_hook(self._native_update)

    def _push_node(self, p: int, kernel: ParamKernel) -> None:
        """The mirror kernel's weights, gradients and counts into the native engine's node ``p``."""
        steps = self.run.counters(p)[2]
        for t in self.run.shapes[kernel.name]:
            self.run.tensor(p, t, 0)[...] = kernel.params[t]
            self.run.tensor(p, t, 1)[...] = kernel.grads[t]  # type: ignore[attr-defined]
        self.run.set_counters(p, kernel.version, kernel.n_grads, steps)
        self.run.params_changed(p)

    def _poll(self) -> bool:
        got = super()._poll()
        if got and hasattr(self, "run"):  # the server's weights, with the gradients gathered so far
            for p, name in enumerate(self.run.native.param_nodes):
                kernel = self.engine.kernels[name]
                for t in self.run.shapes[name]:
                    kernel.grads[t] = self.run.tensor(p, t, 1).copy()  # type: ignore[attr-defined]
                kernel.n_grads = self.run.counters(p)[1]  # type: ignore[attr-defined]
                self._push_node(p, kernel)  # type: ignore[arg-type]
        return got

    def _native_update(self, p: int) -> None:
        """Native node ``p`` holds ``muf`` gradients: the cpu worker's update, on the mirror."""
        kernel = self.engine.kernels[self.run.native.param_nodes[p]]
        for t in self.run.shapes[kernel.name]:
            kernel.grads[t] = self.run.tensor(p, t, 1).copy()  # type: ignore[attr-defined]
        kernel.n_grads = self.run.counters(p)[1]  # type: ignore[attr-defined]
        self._apply(kernel)  # type: ignore[arg-type]
        self._push_node(p, kernel)  # type: ignore[arg-type]
