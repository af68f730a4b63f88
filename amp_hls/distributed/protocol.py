"""The MPI protocol between the parameter server (rank 0) and the workers (ranks 1..N).

Every message is one float64 numpy buffer sent with MPI's buffer interface (no pickle): a fixed
header of small integers (exact in float64) followed by a payload.

- GRADS  worker -> server: [incarnation, seq, node, version_used, n_grads, size] + mean gradient
- WEIGHTS server -> worker: [incarnation, updates, seq] + each node's version + every parameter,
  where ``seq`` is the last of that worker's dumps the weights include (-1: none)
- DONE   worker -> server: [incarnation, instances, train wall s, train CPU s, s waiting on the server]
- STOP   server -> worker: [incarnation]
- BYE    worker -> server: [incarnation], once its other sends have completed; the server keeps
  its MPI progressing until then (a sender's request may complete only as the receiver polls)

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
GRADS_HEADER = 6
WEIGHTS_HEADER = 3  # followed by one version per node (layout order), then the parameters


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
        self.pending: list[tuple[Any, np.ndarray]] = []

    def send(self, data: np.ndarray, dest: int, tag: int) -> None:
        buf = np.ascontiguousarray(data, dtype=np.float64)
        self.pending.append((self.comm.Isend(buf, dest=dest, tag=tag), buf))
        self.pending = [(r, b) for r, b in self.pending if not r.Test()]

    def flush(self, timeout: float) -> bool:
        """Wait (bounded) for every send to complete; False if some never did."""
        deadline = time.monotonic() + timeout
        while self.pending:
            self.pending = [(r, b) for r, b in self.pending if not r.Test()]
            if time.monotonic() > deadline:
                return False
            time.sleep(1e-4)
        return True
