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

from ..checkpoint import read_checkpoint, write_checkpoint
from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..ir import Graph
from ..kernels import Kernel, ParamKernel
from ..kernels.host import LossKernel
from ..models import ModelEntry
from ..numerics import NumericConfig
from .engine import Engine
from .optim import Optimizer, OptimizerConfig

CHECKPOINT_VERSION = 3  # 3: no serving-order RNG state (the engine's order is deterministic)
KEY_SPACE = 1 << 32


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

    def __post_init__(self) -> None:
        for name in ("mak", "muf", "epochs", "max_batch"):
            if getattr(self, name) < 1:
                raise AmpHlsError(f"{name} must be at least 1, got {getattr(self, name)}")

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["optimizer"] = asdict(self.optimizer)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TrainConfig:
        return cls(**{**doc, "optimizer": OptimizerConfig(**doc["optimizer"])})


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

    def __init__(self, entry: ModelEntry, config: TrainConfig, splits: Splits | None = None):
        self.entry = entry
        self.config = config
        self.graph: Graph = entry.build()
        self.splits = splits if splits is not None else entry.data(config.seed)
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

    def _details(self) -> dict[str, Any]:
        return {}

    def metrics(self, records: list) -> tuple[float, float]:
        """(mean loss, the model's metric) over loss records."""
        if not records:
            return float("nan"), float("nan")
        loss = float(np.mean([r.loss for r in records]))
        if self.entry.metric == "mae":
            errors = [np.abs(r.prediction - r.target).mean() for r in records]
            return loss, float(np.mean(errors)) * self.entry.metric_scale
        judged = [r.correct for r in records if r.correct is not None]
        return loss, float(np.mean(judged)) if judged else float("nan")

    # the loop ---------------------------------------------------------------------------------
    def fit(
        self,
        checkpoint: Path | None = None,
        on_epoch: Callable[[EpochRecord], None] | None = None,
        progress_factory: Callable[[int, int], Any] | None = None,
    ) -> list[EpochRecord]:
        """Train until ``epochs`` or the target; checkpoint after every epoch if asked."""
        name = "acc" if self.entry.metric == "accuracy" else self.entry.metric
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
                self.save(checkpoint)
            if self.reached_target:
                break
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

    def __init__(self, entry: ModelEntry, config: TrainConfig, splits: Splits | None = None):
        super().__init__(entry, config, splits)
        self.numerics = NumericConfig(config.numerics)
        self.engine = Engine(self.graph, self.numerics, seed=config.seed, max_batch=config.max_batch)
        self.eval_engine = Engine(self.graph, self.numerics, seed=config.seed, train=False, max_batch=1024)
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
                engine.inject(self._key(), inputs(self.graph, examples[i]))
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
        self._stream(self.eval_engine, examples, 1024)
        loss, metric = self.metrics(drain_losses(self.eval_engine))
        return Evaluation(loss, metric, len(examples))

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
        cls, entry: ModelEntry, path: Path, splits: Splits | None = None, epochs: int | None = None
    ) -> Trainer:
        """Rebuild a trainer from ``path``; in deterministic mode it continues exactly."""
        arrays, meta = read_checkpoint(path)
        if meta.get("version") != CHECKPOINT_VERSION or meta.get("model") != entry.name:
            raise AmpHlsError(f"checkpoint {path} is for model {meta.get('model')!r} "
                              f"(version {meta.get('version')}), not {entry.name!r}")
        try:
            return cls._restore(entry, arrays, meta, splits, epochs)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AmpHlsError(f"checkpoint {path} is incomplete or corrupt: "
                              f"{type(exc).__name__}: {exc}") from None

    @classmethod
    def _restore(
        cls, entry: ModelEntry, arrays: dict[str, np.ndarray], meta: dict[str, Any],
        splits: Splits | None, epochs: int | None,
    ) -> Trainer:
        config = TrainConfig.from_json(meta["config"])
        if epochs is not None:
            config = TrainConfig.from_json({**config.to_json(), "epochs": epochs})
        trainer = cls(entry, config, splits)
        for kernel in trainer.param_kernels:
            kernel.set_params({n: arrays[f"param/{kernel.name}/{n}"] for n in kernel.params})
            kernel.version = meta["versions"][kernel.name]
            # the gradients gathered towards the next update, or the resumed run drifts
            kernel.grads = {n: arrays[f"grad/{kernel.name}/{n}"].astype(g.dtype) for n, g in kernel.grads.items()}
            kernel.n_grads = meta["n_grads"][kernel.name]
        trainer.optimizer.load_state(
            {k: v for k, v in arrays.items() if k.startswith("opt/")}, meta["optimizer_steps"]
        )
        trainer.epoch = meta["epoch"]
        trainer.instances = meta["instances"]
        trainer.train_s = meta["train_s"]
        trainer.next_key = meta["next_key"]
        trainer.rng.bit_generator.state = meta["rng"]
        trainer.history = [EpochRecord(**r) for r in meta["history"]]
        return trainer


def drain_losses(engine: Engine) -> list:
    """Take the loss records every Loss kernel of ``engine`` has gathered so far."""
    records = []
    for kernel in engine.kernels.values():
        if isinstance(kernel, LossKernel):
            records.extend(kernel.results)
            kernel.results.clear()
    return records
