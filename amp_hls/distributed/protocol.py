"""The MPI protocol between the parameter server (rank 0) and the workers (ranks 1..N).

Every message is one float64 numpy buffer sent with MPI's buffer interface (no pickle): a fixed
header of small integers (exact in float64) followed by a payload.

- GRADS  worker -> server: [incarnation, seq, node, version_used, n_grads, size] + mean gradient
- WEIGHTS server -> worker: [incarnation, updates, seq] + each node's version + every parameter,
  where ``seq`` is the last of that worker's dumps the weights include (-1: none)
- DONE   worker -> server: [incarnation, instances, train wall s, train CPU s, s waiting on the server]
- STOP   server -> worker: [incarnation, reason, exit code]: ``STOP_FINISHED`` (training is
  over: say DONE, then BYE), ``STOP_DROPPED`` (the server gave up on this worker: leave now) or
  ``STOP_FAILED`` (the server failed with ``exit code`` and said why: leave now, quietly)
- BYE    worker -> server: [incarnation] + ``BYE_COUNTS``, once its other sends have completed;
  the server keeps its MPI progressing until then (a sender's request may complete only as the
  receiver polls)
- FINAL  server -> worker: [incarnation, peers lost], once every worker has said BYE or been
  dropped: with none lost, every rank may call MPI_Finalize (its barrier needs them all)
- ALIVE  server -> worker: [incarnation], whenever it has sent a worker nothing for
  ``heartbeat_s`` until its FINAL, so that a worker tells a lost server from a busy one

``seq`` numbers a worker's dumps; with the job's ``incarnation`` it makes every dump unique, so a
dump is never applied twice (a resent or replayed one is counted and ignored).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

TAG_GRADS = 11
TAG_WEIGHTS = 12
TAG_DONE = 13
TAG_STOP = 14
TAG_BYE = 15
TAG_ALIVE = 16
TAG_FINAL = 17
STOP_FINISHED, STOP_DROPPED, STOP_FAILED = 0, 1, 2
BYE_COUNTS = ("dumps_sent", "resent", "weights_received")  # what a BYE reports after its incarnation
GRADS_HEADER = 6
WEIGHTS_HEADER = 3  # followed by one version per node (layout order), then the parameters


def heartbeat_s(timeout: float) -> float:
    """How often the server says it is alive when a worker gives it up after ``timeout`` of
    silence: four times per timeout, and at least once a second."""
    return min(1.0, timeout / 4)


def mpi_error(exc: Any) -> str:
    """The innermost cause of an ``MPI.Exception``: the last line of its error stack (e.g.
    "process_vm_readv failed (errno 3)" when the peer died mid-transfer)."""
    lines = [line for line in str(exc.Get_error_string()).splitlines() if line.strip()]
    return lines[-1].split(": ", 1)[-1].strip() if lines else "an MPI error"


def stop_message(incarnation: int, reason: int, code: int = 0) -> np.ndarray:
    return np.array([incarnation, reason, code], dtype=np.float64)


@dataclass(frozen=True)
class ParamLayout:
    """Where each node's tensors sit in the flat parameter vector (nodes sorted by name)."""

    entries: tuple[tuple[str, str, tuple[int, ...]], ...]  # (node, tensor, shape)

    @classmethod
    def of(cls, params: dict[str, dict[str, np.ndarray]]) -> ParamLayout:
        return cls(tuple((n, t, params[n][t].shape) for n in sorted(params) for t in sorted(params[n])))

    @property
    def nodes(self) -> list[str]:
        return sorted({n for n, _, _ in self.entries})

    def node_size(self, node: str) -> int:
        return sum(int(np.prod(s)) for n, _, s in self.entries if n == node)

    @property
    def size(self) -> int:
        return sum(int(np.prod(s)) for _, _, s in self.entries)

    def flatten(self, params: dict[str, dict[str, np.ndarray]], node: str | None = None) -> np.ndarray:
        parts = [np.asarray(params[n][t], dtype=np.float64).ravel() for n, t, _ in self.entries
                 if node is None or n == node]
        return np.concatenate(parts) if parts else np.zeros(0)

    def unflatten(self, vector: np.ndarray, node: str | None = None) -> dict[str, dict[str, np.ndarray]]:
        out: dict[str, dict[str, np.ndarray]] = {}
        at = 0
        for n, t, shape in self.entries:
            if node is not None and n != node:
                continue
            size = int(np.prod(shape))
            out.setdefault(n, {})[t] = vector[at : at + size].reshape(shape)
            at += size
        return out


class Outbox:
    """Non-blocking sends with their buffers kept alive until MPI is done with them.

    Both sides only ever send with ``Isend``: two blocking sends of large buffers towards each
    other would deadlock once MPI switches to its rendezvous protocol.
    """

    def __init__(self, comm: Any):
        self.comm = comm
        self.pending: list[tuple[Any, np.ndarray, int]] = []  # (request, buffer, destination)
        self.failed: set[int] = set()  # destinations a send to which failed (a lost peer)

    def send(self, data: np.ndarray, dest: int, tag: int) -> None:
        from mpi4py import MPI

        buf = np.ascontiguousarray(data, dtype=np.float64)
        try:
            self.pending.append((self.comm.Isend(buf, dest=dest, tag=tag), buf, dest))
        except MPI.Exception:
            self.failed.add(dest)
        self._settle()

    def _settle(self) -> None:
        """Forget the sends that completed, or failed (their destination goes into ``failed``)."""
        from mpi4py import MPI

        still = []
        for request, buf, dest in self.pending:
            try:
                if request.Test():
                    continue
            except MPI.Exception:
                self.failed.add(dest)
                continue
            still.append((request, buf, dest))
        self.pending = still

    def flush(self, timeout: float) -> bool:
        """Wait (bounded) for every send to complete; False if some never did."""
        deadline = time.monotonic() + timeout
        while True:
            self._settle()
            if not self.pending:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(1e-4)
