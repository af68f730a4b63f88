"""``--backend native``: the numpy trainer's loop, engine and optimizers run by the generated C++.

``NativeTrainer`` is the numpy ``Trainer`` with its training epochs handed to the native runtime,
on one thread (deterministic: the numpy serving order) or on worker threads that own the nodes:
the same initial weights (the numpy kernels' seeded initialisation), the same shuffles (its
generator), the same checkpoints (the numpy kernels and optimizer are kept as a mirror of the
native state and written by ``Trainer.save``), so a checkpoint moves between the two backends.
Evaluation runs forward only on a second native engine with the training weights; it is
outside the training time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..ir import GraphCore
from ..kernels.host import LossRecord
from ..message import MAX_STATE_WORDS, Tag
from ..models import ModelSpec
from ..runtime.optim import MOMENTS
from ..runtime.trainer import EVAL_WINDOW, Evaluation, TrainConfig, Trainer
from .library import NativeRun
from .partition import partition

PROGRESS_CHUNK = 256  # instances per native call when a progress bar is shown
# One thread unless asked, not the cores available: on this project's 2-core machine, quiet,
# two workers ran native async at 1.18-1.43x one's instances/s on list-rnn, tree-rnn and
# ggsnn-qm9 but mlp at 0.64x, and native sync at 0.34-1.15x (docs/native.md, Worker threads);
# and one thread is the bit-exact mode.
DEFAULT_THREADS = 1


class NativeTrainer(Trainer):
    """Trains on the native runtime: ``threads`` 1 is the deterministic mode (the numpy serving
    order, bit-exact in fixed point); more run the nodes on that many worker threads."""

    backend = "native"

    def __init__(self, entry: ModelSpec, config: TrainConfig, splits: Splits | None = None,
                 threads: int = DEFAULT_THREADS):
        super().__init__(entry, config, splits)
        self.engine.on_backward = None  # the numpy engine only mirrors parameters now
        self.run = NativeRun(self.graph, self.numerics, config.optimizer, mak=config.mak, muf=config.muf,
                             sync=config.sync, max_batch=config.max_batch)
        self.eval_run: NativeRun | None = None  # forward only, made at the first evaluation
        self._eval_data: Sequence[Example] | None = None
        self.use_threads(threads)
        self._set_data(self.splits.train)
        self._push()

    def use_threads(self, threads: int) -> None:
        """Train on ``threads`` worker threads from the next epoch on (1: the deterministic mode)."""
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise AmpHlsError(f"threads must be a positive integer, got {threads!r}")
        self.threads = threads
        self.set_owners(partition(self.graph, threads, self.run.node_ticks()))

    def set_owners(self, owners: list[int]) -> None:
        """Node ``i`` on worker ``owners[i]`` from the next epoch on (between epochs only)."""
        self.owners = list(owners)
        self.run.set_threads(self.threads, self.owners)

    def rebalance(self) -> bool:
        """After an epoch on worker threads: the partition from the costs measured so far (the
        first epoch ran on the static model), set when it differs; whether it did. The epoch
        ended with every inbox, ring and backlog empty and the workers joined, so the library
        takes a new partition (it refuses one during an epoch)."""
        owners = partition(self.graph, self.threads, self.run.node_ticks())
        if owners == self.owners:
            return False
        self.set_owners(owners)
        return True

    def _set_data(self, examples: Sequence[Example]) -> None:
        """Every training example's payload and tag state per source, packed once for the library."""
        _pack(self.entry, self.graph, self.run, examples)

    # the native state <-> the numpy mirror ------------------------------------------------------
    def _push(self) -> None:
        """Parameters, gradients, optimizer state and counters from the numpy mirror to the library."""
        moments = MOMENTS[self.config.optimizer.kind]
        for p, name in enumerate(self.run.native.param_nodes):
            kernel = self.engine.kernels[name]
            state = self.optimizer.state.get(name, {})
            for t in self.run.shapes[name]:
                self.run.tensor(p, t, 0)[...] = kernel.params[t]  # type: ignore[attr-defined]
                self.run.tensor(p, t, 1)[...] = kernel.grads[t]  # type: ignore[attr-defined]
                for what, moment in ((2, "m"), (3, "v")):
                    view = self.run.tensor(p, t, what)
                    view[...] = state[f"{t}.{moment}"] if moment in moments and f"{t}.{moment}" in state else 0.0
            self.run.set_counters(p, kernel.version, kernel.n_grads,  # type: ignore[attr-defined]
                                  self.optimizer.steps.get(name, 0))
            self.run.params_changed(p)
        self.run.next_key = self.next_key

    def _pull(self) -> None:
        """The library's state into the numpy mirror (for evaluation, checkpoints and the summary)."""
        moments = MOMENTS[self.config.optimizer.kind]
        for p, name in enumerate(self.run.native.param_nodes):
            kernel = self.engine.kernels[name]
            version, n_grads, steps = self.run.counters(p)
            for t in self.run.shapes[name]:
                kernel.params[t] = self.run.tensor(p, t, 0).copy()  # type: ignore[attr-defined]
                kernel.grads[t] = self.run.tensor(p, t, 1).copy()  # type: ignore[attr-defined]
            kernel.version, kernel.n_grads = version, n_grads  # type: ignore[attr-defined]
            hist = self.run.staleness(p)
            kernel.staleness.histogram = Counter({d: int(c) for d, c in enumerate(hist) if c})  # type: ignore[attr-defined]
            if steps:
                self.optimizer.steps[name] = steps
                self.optimizer.state[name] = {f"{t}.{m}": self.run.tensor(p, t, 2 if m == "m" else 3).copy()
                                              for t in self.run.shapes[name] for m in ("m", "v") if m in moments}
        self.next_key = self.run.next_key

    # training -------------------------------------------------------------------------------------
    def train_epoch(self, progress: Callable[[int], None] | None = None) -> tuple[float, float]:
        order = self.rng.permutation(len(self.splits.train))
        start = time.perf_counter()
        self.run.epoch_begin(order)
        chunk = PROGRESS_CHUNK if progress is not None else len(order) + 1
        while True:
            done = self.run.epoch_run(chunk)
            if done and progress is not None:
                progress(done)
            if done < chunk:
                break
        self.train_s += time.perf_counter() - start
        self.instances += len(order)
        self.epoch += 1
        self.next_key = self.run.next_key
        if self.threads > 1:
            self.rebalance()
        return self.epoch_metrics()

    def epoch_metrics(self, run: NativeRun | None = None) -> tuple[float, float]:
        """(mean loss, metric) of the instances ``run`` (default: the training run) finished since
        the last call: ``ModelSpec.score``'s numbers, from the arrays directly where the score is
        an accuracy (no record objects)."""
        run = run if run is not None else self.run
        if type(self.entry).score is not ModelSpec.score or self.entry.metric != "accuracy":
            return self.metrics(self.take_records(run))
        taken = [run.records(li) for li in range(len(run.native.loss_nodes))]
        losses = np.concatenate([t[0] for t in taken])
        if not len(losses):
            return float("nan"), float("nan")
        correct = np.concatenate([t[1] for t in taken])
        judged = correct[correct >= 0].astype(bool)
        return float(np.mean(losses)), float(np.mean(judged)) if len(judged) else float("nan")

    def take_records(self, run: NativeRun | None = None) -> list[LossRecord]:
        """The loss records of the instances ``run`` (default: the training run) finished since the
        last call, in completion order (their ``tag`` is ``Tag(-1)``: the native records keep no
        tags, and no score reads them)."""
        run = run if run is not None else self.run
        out: list[LossRecord] = []
        for li, name in enumerate(run.native.loss_nodes):
            loss, correct, rows, pred, target, words = run.records(li)
            pw = self.graph.input_spec(name, 0).width
            tw = self.graph.input_spec(name, 1).width
            ends = np.cumsum(rows)
            target_dtype = np.int64 if self.graph.nodes[name].fn != "mse" else np.float64  # type: ignore[attr-defined]
            target = target.astype(target_dtype)
            for k in range(len(loss)):
                lo, hi = int(ends[k] - rows[k]), int(ends[k])
                out.append(LossRecord(Tag(-1), float(loss[k]), pred[lo * pw : hi * pw].reshape(-1, pw),
                                      target[lo * tw : hi * tw].reshape(-1, tw),
                                      None if correct[k] < 0 else bool(correct[k]),
                                      words[k : k + 1].copy() if len(words) else None))
        return out

    def evaluate(self, examples: Sequence[Example], keep_keys: bool = False) -> Evaluation:
        """Forward only on the current weights, in a second native engine (train=False, the numpy
        evaluation's window and batch, one thread: its serving order, so in fixed point its exact
        loss and metric). Its instances take keys after the training ones as the numpy trainer's
        do, unless ``keep_keys`` (``api.evaluate``: looking leaves the trainer as it was)."""
        if self.eval_run is None:
            self.eval_run = NativeRun(self.graph, self.numerics, self.config.optimizer, mak=EVAL_WINDOW, muf=1,
                                      sync=False, max_batch=EVAL_WINDOW, train=False)
        ev = self.eval_run
        for p, name in enumerate(self.run.native.param_nodes):
            for t in self.run.shapes[name]:
                ev.tensor(p, t, 0)[...] = self.run.tensor(p, t, 0)
            ev.params_changed(p)
        if self._eval_data is not examples:  # packed once per data set (the validation set every epoch)
            _pack(self.entry, self.graph, ev, examples)
            self._eval_data = examples
        ev.next_key = self.run.next_key
        ev.epoch_begin(np.arange(len(examples)))
        if ev.epoch_run(len(examples) + 1) != len(examples):
            raise AmpHlsError(f"native evaluation finished fewer than its {len(examples)} instances")
        loss, metric = self.epoch_metrics(ev)
        if not keep_keys:
            self.run.next_key = self.next_key = ev.next_key
        return Evaluation(loss, metric, len(examples))

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        self._pull()
        return super().parameters()

    def staleness(self) -> dict[str, dict[str, float]]:
        self._pull()
        return super().staleness()

    def conservation_report(self) -> list[str]:
        """The numpy engine's conservation check (``Engine.conservation_report``) on the native counts."""
        problems = []
        waiting = self.run.waiting()
        if waiting:
            problems.append(f"{waiting} messages still waiting")
        counts = self.run.node_counts()
        for i, name in enumerate(self.run.native.nodes):
            held = self.run.pending(i)
            if held:
                problems.append(f"node '{name}' still holds {held} entries")
            fwd_in, fwd_out, bwd_in, bwd_out = (int(c) for c in counts[i])
            if fwd_in != bwd_out:
                problems.append(f"node '{name}': {fwd_in} forward in but {bwd_out} backward out")
            if fwd_out != bwd_in:
                problems.append(f"node '{name}': {fwd_out} forward out but {bwd_in} backward in")
        return problems

    def _details(self) -> dict[str, Any]:
        problems = self.conservation_report()
        return {
            "conservation_ok": not problems,
            "conservation_problems": problems,
            "staleness": self.staleness(),
            "saturations": self.run.saturations(),
            "threads": self.threads,
        }

    def save(self, path: Path) -> None:
        self._pull()
        super().save(path)

    @classmethod
    def resume(cls, entry: ModelSpec, path: Path, splits: Splits | None = None,
               epochs: int | None = None, threads: int | None = None) -> NativeTrainer:
        trainer = super().resume(entry, path, splits, epochs)  # built as cls(entry, config, splits)
        assert isinstance(trainer, NativeTrainer)
        if threads is not None:
            trainer.use_threads(threads)
        trainer._push()
        return trainer


def _pack(entry: ModelSpec, graph: GraphCore, run: NativeRun, examples: Sequence[Example]) -> None:
    """Every example's payload and tag state per source into ``run``, packed once."""
    feeds = [entry.inputs(e) for e in examples]
    n = len(examples)
    for s, name in enumerate(run.native.source_nodes):
        index = graph.nodes[name].dtype == "index"  # type: ignore[attr-defined]
        payloads = [np.asarray(f[name][1]) for f in feeds]
        if index:  # as the source kernel converts them
            payloads = [p.astype(np.int64) for p in payloads]
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([p.shape[0] for p in payloads])
        states = np.zeros((n, MAX_STATE_WORDS), dtype=np.uint16)
        state_len = np.zeros(n, dtype=np.uint8)
        for i, f in enumerate(feeds):
            state = tuple(f[name][0])
            states[i, : len(state)] = state
            state_len[i] = len(state)
        rows = np.concatenate([p.astype(np.float64) for p in payloads], axis=0) if n else np.zeros((0, 1))
        run.set_data(s, rows, offsets, states, state_len)
