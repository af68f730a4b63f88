"""Training on the numpy runtime: asynchronous model-parallel (AMP) or a synchronous baseline.

AMP (docs/contracts.md, IR): new instances are admitted while fewer than ``mak`` are in flight; each
parameter node applies its own update once it has gathered ``muf`` gradient messages, with no
barrier, so a forward may run on weights newer than its backward sees (staleness, recorded per
node). The synchronous baseline runs minibatches of ``batch`` instances to completion and then
updates every node at once: ordinary minibatch SGD in the same engine, for side-by-side runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import Contents, write_checkpoint
from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..interrupts import interrupts_deferred
from ..ir import Graph
from ..kernels import Kernel, ParamKernel
from ..kernels.host import LossKernel
from ..models import ModelSpec
from ..numerics import NumericConfig, Precision
from .check import check_examples
from .engine import Engine
from .optim import Optimizer, OptimizerConfig

CHECKPOINT_VERSION = 3  # 3: no serving-order RNG state (the engine's order is deterministic)
KEY_SPACE = 1 << 32
EVAL_WINDOW = 1024  # evaluation: instances in flight and the most messages one kernel call takes


@dataclass(frozen=True)
class TrainConfig:
    mak: int = 16  # max active keys (docs/glossary.md)
    muf: int = 8  # min update frequency (docs/glossary.md)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    epochs: int = 10
    seed: int = 0
    numerics: str = "float"
    target: float | None = None  # stop once the validation metric reaches it
    sync: bool = False  # synchronous minibatch baseline (batch = mak)
    max_batch: int = 256  # most messages one kernel call takes
    # fixed point only: the precision of some tensor classes (data, weights, grads), the rest default
    precision: dict[str, Precision] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("mak", "muf", "epochs", "max_batch"):
            if getattr(self, name) < 1:
                raise AmpHlsError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not isinstance(self.seed, int) or self.seed < 0:  # numpy's generators take none else
            raise AmpHlsError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.precision and self.numerics != "fixed":
            raise AmpHlsError(f"a {'/'.join(sorted(self.precision))} precision is set, but numerics is "
                              f"{self.numerics!r}: a precision is for fixed point (numerics 'fixed', "
                              "--numerics fixed), or drop it")
        self.numeric_config()  # an unknown tensor class or a bad precision fails here

    def numeric_config(self) -> NumericConfig:
        """How the runtimes compute: the mode, with this run's fixed-point precisions."""
        unknown = sorted(set(self.precision) - {"data", "weights", "grads"})
        if unknown:
            raise AmpHlsError(f"unknown tensor class(es) {', '.join(unknown)}: precision is set for data, weights, grads")
        return NumericConfig(self.numerics, **self.precision)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["optimizer"] = asdict(self.optimizer)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TrainConfig:
        precision = {k: Precision.from_json(v) for k, v in doc.get("precision", {}).items()}
        return cls(**{**doc, "optimizer": OptimizerConfig(**doc["optimizer"]), "precision": precision})


@dataclass
class EpochRecord:
    epoch: int
    wall_s: float  # since training started (excluding evaluation)
    train_loss: float
    train_metric: float  # the model's metric (accuracy, or MAE in its unit) seen in training
    val_loss: float
    val_metric: float
    instances: int


@dataclass
class Evaluation:
    loss: float
    metric: float
    count: int


class TrainerBase:
    """The epoch loop, the target, the metric and the summary, whatever executes the graph.

    Subclasses provide ``train_epoch``, ``evaluate``, ``backend`` and ``_details`` (their part
    of the summary); ``save`` only where checkpoints are supported.
    """

    backend = ""

    def __init__(self, entry: ModelSpec, config: TrainConfig, splits: Splits | None = None):
        self.entry = entry
        self.config = config
        self.graph: Graph = entry.build()
        self.splits = splits if splits is not None else entry.splits(config.seed)
        check_examples(entry, self.graph, self.splits)  # every example, before any work
        self.epoch = 0
        self.instances = 0
        self.train_s = 0.0
        self.history: list[EpochRecord] = []

    def train_epoch(self, progress: Callable[[int], None] | None = None) -> tuple[float, float]:
        raise NotImplementedError

    def evaluate(self, examples: Sequence[Example]) -> Evaluation:
        raise NotImplementedError

    def save(self, path: Path) -> None:
        raise AmpHlsError(f"the {self.backend} backend does not write checkpoints")

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        """The current float parameters of every parameter node (what a ``Predictor`` takes)."""
        raise NotImplementedError

    def _details(self) -> dict[str, Any]:
        return {}

    def metrics(self, records: list) -> tuple[float, float]:
        """(mean loss, the model's metric) over loss records."""
        return self.entry.score(records)

    # the loop ---------------------------------------------------------------------------------
    def fit(
        self,
        checkpoint: Path | None = None,
        on_epoch: Callable[[EpochRecord], None] | None = None,
        progress_factory: Callable[[int, int], Any] | None = None,
    ) -> list[EpochRecord]:
        """Train until ``epochs`` or the target; checkpoint after every epoch if asked. SIGINT
        ends it with a KeyboardInterrupt that says what ``checkpoint`` holds (it is written
        atomically, so an interrupt never leaves half of one)."""
        name = "acc" if self.entry.metric == "accuracy" else self.entry.metric
        saved = None  # the epoch the checkpoint holds, once this run has written it
        try:
            while self.epoch < self.config.epochs:
                bar = progress_factory(self.epoch, len(self.splits.train)) if progress_factory else None
                train_loss, train_metric = self.train_epoch(bar.update if bar is not None else None)
                val = self.evaluate(self.splits.val)
                record = EpochRecord(
                    self.epoch, self.train_s, train_loss, train_metric, val.loss, val.metric, self.instances
                )
                self.history.append(record)
                if bar is not None:
                    bar.set_postfix({"loss": f"{train_loss:.3f}", f"val_{name}": f"{val.metric:.3f}",
                                     "inst_s": f"{self.instances / max(self.train_s, 1e-9):.0f}"})
                    bar.close()
                if on_epoch is not None:
                    on_epoch(record)
                if checkpoint is not None:
                    with interrupts_deferred():  # so that ``saved`` always names what the file holds
                        self.save(checkpoint)
                        saved = self.epoch
                if self.reached_target:
                    break
        except KeyboardInterrupt:
            if checkpoint is None:
                raise
            raise KeyboardInterrupt(f"{checkpoint} holds epoch {saved}: --resume {checkpoint} goes on from it"
                                    if saved is not None else f"in epoch {self.epoch + 1}, before this run "
                                    f"wrote {checkpoint}") from None
        return self.history

    def _reached(self, record: EpochRecord) -> bool:
        target = self.config.target
        return target is not None and self.entry.better(record.val_metric, target)

    @property
    def reached_target(self) -> bool:
        return bool(self.history) and self._reached(self.history[-1])

    def time_to_target(self) -> float | None:
        return next((r.wall_s for r in self.history if self._reached(r)), None)

    def summary(self) -> dict[str, Any]:
        """The JSON run summary: model, backend, numerics, epochs, the test metric
        (``test_accuracy`` or ``test_mae``), speed, conservation and staleness, and the history."""
        test = self.evaluate(self.splits.test)
        metric = self.entry.metric
        doc: dict[str, Any] = {
            "model": self.entry.name,
            "dataset": self.splits.name,
            "backend": self.backend,
            "numerics": self.config.numerics,
            "mode": "sync" if self.config.sync else "async",
            "config": self.config.to_json(),
            "epochs": self.epoch,
            "instances": self.instances,
            "metric": metric,
            "metric_unit": self.entry.metric_unit,
            f"val_{metric}": self.history[-1].val_metric if self.history else None,
            f"test_{metric}": test.metric,
            "test_metric": test.metric,
            "test_loss": test.loss,
            "wall_s": self.train_s,
            "instances_per_s": self.instances / self.train_s if self.train_s else 0.0,
            "target": self.config.target,
            "reached_target": self.reached_target,
            "time_to_target_s": self.time_to_target(),
        }
        doc.update(self._details())
        doc["history"] = [asdict(r) for r in self.history]
        return doc


class Trainer(TrainerBase):
    """Trains one zoo model on the CPU runtime; see the module docstring for the two modes."""

    backend = "cpu"

    def __init__(self, entry: ModelSpec, config: TrainConfig, splits: Splits | None = None):
        super().__init__(entry, config, splits)
        self.numerics = config.numeric_config()
        self.engine = Engine(self.graph, self.numerics, seed=config.seed, max_batch=config.max_batch)
        self.eval_engine = Engine(self.graph, self.numerics, seed=config.seed, train=False, max_batch=EVAL_WINDOW)
        self.optimizer = Optimizer(config.optimizer)
        self.rng = np.random.default_rng(config.seed + 2)
        self.next_key = 0
        if not config.sync:
            self.engine.on_backward = self._maybe_update

    # updates ----------------------------------------------------------------------------------
    @property
    def param_kernels(self) -> list[ParamKernel]:
        return [k for k in self.engine.kernels.values() if isinstance(k, ParamKernel)]

    def _maybe_update(self, kernel: Kernel) -> None:
        if isinstance(kernel, ParamKernel) and kernel.n_grads >= self.config.muf:
            self._apply(kernel)

    def _apply(self, kernel: ParamKernel) -> None:
        n = kernel.n_grads
        mean = {k: g / n for k, g in kernel.grads_as_float().items()}
        kernel.set_params(self.optimizer.step(kernel.name, kernel.params, mean))
        kernel.zero_grads()

    # running instances ------------------------------------------------------------------------
    def _key(self) -> int:
        key = self.next_key
        self.next_key = (self.next_key + 1) % KEY_SPACE
        return key

    def _stream(
        self,
        engine: Engine,
        examples: Sequence[Example],
        window: int,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        """Admit ``examples`` while fewer than ``window`` are in flight; run until all finish."""
        i, n = 0, len(examples)
        inputs, step = self.entry.inputs, engine.step
        while i < n or engine.active_keys:
            while i < n and engine.active_keys < window:
                engine.inject(self._key(), inputs(examples[i]))
                i += 1
            finished = step()
            while not finished and not engine.idle:  # nothing to admit until a key finishes
                finished = step()
            if finished:
                if on_finish is not None:
                    on_finish(len(finished))
            elif engine.active_keys:
                raise AmpHlsError("engine stalled with instances in flight (a join never completed)")

    def train_epoch(self, progress: Callable[[int], None] | None = None) -> tuple[float, float]:
        """One pass over the shuffled training set; returns (mean loss, metric) seen in training."""
        order = self.rng.permutation(len(self.splits.train))
        examples = [self.splits.train[i] for i in order]
        start = time.perf_counter()
        if self.config.sync:
            for lo in range(0, len(examples), self.config.mak):
                batch = examples[lo : lo + self.config.mak]
                self._stream(self.engine, batch, len(batch), progress)
                for kernel in self.param_kernels:
                    if kernel.n_grads:
                        self._apply(kernel)
        else:
            self._stream(self.engine, examples, self.config.mak, progress)
        self.train_s += time.perf_counter() - start
        self.instances += len(examples)
        self.epoch += 1
        return self.metrics(drain_losses(self.engine))

    def evaluate(self, examples: Sequence[Example]) -> Evaluation:
        """Forward only (no caching) on the current weights; the same weights give the same numbers."""
        for kernel in self.eval_engine.kernels.values():
            if isinstance(kernel, ParamKernel):
                kernel.set_params(self.engine.kernels[kernel.name].params)  # type: ignore[attr-defined]
        self._stream(self.eval_engine, examples, EVAL_WINDOW)
        loss, metric = self.metrics(drain_losses(self.eval_engine))
        return Evaluation(loss, metric, len(examples))

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        return {k.name: dict(k.params) for k in self.param_kernels}

    def staleness(self) -> dict[str, dict[str, float]]:
        return {
            k.name: {"mean": k.staleness.mean, "max": k.staleness.max, "count": k.staleness.count}
            for k in self.param_kernels
        }

    def _details(self) -> dict[str, Any]:
        problems = self.engine.conservation_report()
        return {
            "conservation_ok": not problems,
            "conservation_problems": problems,
            "staleness": self.staleness(),
            "saturations": self.engine.counter.as_dict(),
        }

    # checkpoints: one .npz of plain arrays plus a JSON string, loaded with allow_pickle=False -----
    def save(self, path: Path) -> None:
        arrays: dict[str, np.ndarray] = {}
        for kernel in self.param_kernels:
            for name, value in kernel.params.items():
                arrays[f"param/{kernel.name}/{name}"] = value
            for name, value in kernel.grads.items():  # gradients gathered towards the next update
                arrays[f"grad/{kernel.name}/{name}"] = value
        arrays.update(self.optimizer.state_arrays())
        meta = {
            "version": CHECKPOINT_VERSION,
            "model": self.entry.name,
            "config": self.config.to_json(),
            "epoch": self.epoch,
            "instances": self.instances,
            "train_s": self.train_s,
            "next_key": self.next_key,
            "rng": self.rng.bit_generator.state,
            "optimizer_steps": self.optimizer.steps,
            "versions": {k.name: k.version for k in self.param_kernels},
            "n_grads": {k.name: k.n_grads for k in self.param_kernels},
            "history": [asdict(r) for r in self.history],
        }
        write_checkpoint(path, arrays, meta)

    @classmethod
    def resume(
        cls, entry: ModelSpec, path: Path, splits: Splits | None = None, epochs: int | None = None
    ) -> Trainer:
        """Rebuild a trainer from ``path``; in deterministic mode it continues exactly. Every
        array and counter of the file is checked before any is loaded (``runtime.restore``)."""
        from ..numerics import ACC_MAX, ACC_MIN
        from .restore import param_names, read_history, read_optimizer_state, read_params

        contents = Contents(path)
        meta = contents.meta
        if meta.get("version") != CHECKPOINT_VERSION or meta.get("model") != entry.name:
            raise AmpHlsError(f"checkpoint {path} is for model {meta.get('model')!r} "
                              f"(version {meta.get('version')}), not {entry.name!r}")
        try:
            config = TrainConfig.from_json(contents.field("config", dict))
            if epochs is not None:
                config = TrainConfig.from_json({**config.to_json(), "epochs": epochs})
        except (KeyError, TypeError, ValueError, AttributeError, AmpHlsError) as exc:
            raise contents.error(f"its training settings are invalid: {exc}") from None
        trainer = cls(entry, config, splits)
        kernels = trainer.param_kernels
        shapes = {k.name: {t: v.shape for t, v in k.params.items()} for k in kernels}
        params = read_params(contents, shapes)
        # the gradients gathered towards the next update, or the resumed run drifts
        grads = {k.name: {t: contents.array(f"grad/{k.name}/{t}", g.shape, g.dtype.kind) for t, g in k.grads.items()}
                 for k in kernels}
        for name, value in ((f"grad/{n}/{t}", g) for n, gs in grads.items() for t, g in gs.items()):
            if value.dtype.kind == "i" and (value.min(initial=0) < ACC_MIN or value.max(initial=0) > ACC_MAX):
                raise contents.error(f"array {name!r} holds values beyond the 48-bit accumulators")
        opt, steps = read_optimizer_state(contents, config.optimizer.kind, shapes)
        contents.only(param_names(shapes) | {f"grad/{n}/{t}" for n, gs in grads.items() for t in gs} | set(opt))
        versions = contents.counters("versions", shapes)
        n_grads = contents.counters("n_grads", shapes, hi=config.muf - 1)  # at muf it would have updated
        epoch, instances = contents.counter("epoch"), contents.counter("instances")
        train_s = contents.number("train_s")
        next_key = contents.counter("next_key", hi=KEY_SPACE - 1)
        history = read_history(contents)
        try:
            trainer.rng.bit_generator.state = contents.field("rng", dict)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:  # numpy checks it as it sets it
            raise contents.error(f"its random generator state is invalid: {exc}") from None
        for kernel in kernels:  # all checked: now load it
            kernel.set_params(params[kernel.name])
            kernel.version = versions[kernel.name]
            kernel.grads = {n: g.astype(kernel.grads[n].dtype) for n, g in grads[kernel.name].items()}
            kernel.n_grads = n_grads[kernel.name]
        trainer.optimizer.load_state(opt, steps)
        trainer.epoch, trainer.instances, trainer.train_s = epoch, instances, train_s
        trainer.next_key = next_key
        trainer.history = history
        return trainer


def drain_losses(engine: Engine) -> list:
    """Take the loss records every Loss kernel of ``engine`` has gathered so far."""
    records = []
    for kernel in engine.kernels.values():
        if isinstance(kernel, LossKernel):
            records.extend(kernel.results)
            kernel.results.clear()
    return records
