"""Ranks 1..N: workers that run AMP on their own shard and the server's weights.

A worker is the CPU trainer with one change: when a node has gathered ``muf`` gradients it
sends their mean to the server instead of updating itself, and it installs whatever weights the
server has sent since (checked without blocking). The server decides when a worker gets weights
(every ``n_sync`` of its dumps), so no worker ever waits on another.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..datasets import Splits
from ..errors import AmpHlsError
from ..kernels import ParamKernel
from ..models import ModelEntry
from ..runtime.trainer import TrainConfig, Trainer
from .protocol import TAG_DONE, TAG_GRADS, TAG_STOP, WEIGHTS_HEADER, Outbox, ParamLayout


class _Stopped(Exception):
    """The server said stop."""


class WorkerTrainer(Trainer):
    backend = "cpu"

    def __init__(
        self,
        comm: Any,
        entry: ModelEntry,
        config: TrainConfig,
        first_weights_timeout: float = 60.0,
        die_after_s: float | None = None,
        duplicate_every: int = 0,
    ):
        rank, size = comm.Get_rank(), comm.Get_size()
        full = entry.data(config.seed)
        shard = Splits(full.name, full.train[rank - 1 :: size - 1], full.val[:1], full.test[:1], full.description)
        super().__init__(entry, config, shard)
        self.comm = comm
        self.outbox = Outbox(comm)
        self.rank = rank
        self.layout = ParamLayout.of({k.name: k.params for k in self.param_kernels})
        self.seq = 0
        self.incarnation = -1
        self.stopped = False
        self.server_version = 0
        # fault injection for tests: this worker resends every n-th dump, or dies abruptly after
        # so many seconds
        self.duplicate_every = duplicate_every
        self.die_at = None if die_after_s is None else time.monotonic() + die_after_s
        deadline = time.monotonic() + first_weights_timeout
        while not self._poll():
            if time.monotonic() > deadline:
                raise AmpHlsError(f"worker {rank}: no weights from the server within {first_weights_timeout} s")
            time.sleep(1e-3)

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
        self.seq += 1
        kernel.zero_grads()
        if self.die_at is not None and time.monotonic() > self.die_at:
            os._exit(3)  # a crash, not a shutdown: no goodbye to the server
        self._poll()
        if self.stopped:
            raise _Stopped

    def _poll(self) -> bool:
        """Install the newest weights the server sent (older ones are superseded); notice a stop.

        True if weights arrived."""
        from mpi4py import MPI

        newest = None
        status = MPI.Status()
        while self.comm.Iprobe(source=0, tag=MPI.ANY_TAG, status=status):
            buf = np.empty(status.Get_count(MPI.DOUBLE), dtype=np.float64)
            self.comm.Recv(buf, source=0, tag=status.Get_tag())
            if status.Get_tag() == TAG_STOP:
                self.stopped = True
                break
            newest = buf
        if newest is None:
            return False
        self.incarnation, self.server_version = int(newest[0]), int(newest[1])
        n_nodes = len(self.layout.nodes)
        versions = dict(zip(self.layout.nodes, newest[WEIGHTS_HEADER : WEIGHTS_HEADER + n_nodes].astype(int)))
        params = self.layout.unflatten(newest[WEIGHTS_HEADER + n_nodes :])
        for kernel in self.param_kernels:
            kernel.set_params(params[kernel.name])
            kernel.version = int(versions[kernel.name])  # staleness counts that node's updates
        return True

    def work(self, timeout: float = 60.0) -> None:
        """Train the shard for ``epochs`` (or until stopped), then leave cleanly: say DONE, wait
        for the server's STOP, and let the last sends drain (the server keeps receiving)."""
        try:
            while self.epoch < self.config.epochs and not self.stopped:
                self.train_epoch()
        except _Stopped:
            pass
        done = np.array([self.incarnation, self.instances, self.train_s], dtype=np.float64)
        self.outbox.send(done, dest=0, tag=TAG_DONE)
        deadline = time.monotonic() + timeout
        while not self.stopped and time.monotonic() < deadline:
            self._poll()
            time.sleep(1e-3)
        while not self.outbox.flush(timeout=0.05) and time.monotonic() < deadline:
            self._poll()
