"""Training with the device-placed nodes on a device backend and the host as parameter server.

The host runs the host-placed nodes (sources, and losses unless they are placed on the device)
on the numpy engine and the parameter server; the device runs everything else and streams
gradient sums back, and a device loss its report of every instance (``HostRunner.drain_losses``).
Validation and test accuracy are measured on the numpy fixed-point engine with the very weights
the server last quantised, which is bit-exact with the device's forward pass (held by
tests/test_csim.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint import write_checkpoint
from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..ir import Graph
from ..kernels import ParamKernel
from ..models import ModelSpec
from ..numerics import NumericConfig, quantize
from ..placement import Placement, place
from ..runtime import Engine
from ..runtime.trainer import Evaluation, TrainConfig, TrainerBase, drain_losses
from .device import Device, DeviceError
from .runner import HostRunner
from .server import ParameterServer
from .settings import SAMPLE, check_run, messages_per_instance

BACKENDS = ("numpy-device", "csim", "rtlsim", "pynq")


def make_device(
    backend: str, graph: Graph, placement: Placement, numerics: NumericConfig, muf: int,
    project_dir: Path | None, cache_slots: int, bitstream: Path | None = None, max_in_flight: int | None = None,
) -> Device:
    """The device of ``backend``: csim and rtlsim generate their project (into ``project_dir``)
    for this run's settings; pynq loads a bitstream generated before (``bitstream``, or the
    bitstream of the project or deployment folder ``project_dir``)."""
    if backend == "numpy-device":
        from .cpu import CpuDevice

        return CpuDevice(placement, numerics, muf=muf)
    if backend == "csim":
        from ..codegen.project import write_project
        from ..design import DeviceOptions, build_design
        from .csim import CsimDevice

        root = project_dir if project_dir is not None else Path("build") / f"{graph.name}_hls"
        options = DeviceOptions(numerics=numerics, muf=muf, cache_slots=cache_slots, max_in_flight=max_in_flight)
        return CsimDevice(write_project(build_design(graph, options), root, rtl=False))
    if backend == "rtlsim":
        from ..design import DeviceOptions
        from .rtlsim import RtlsimDevice

        root = project_dir if project_dir is not None else Path("build") / f"{graph.name}_rtl"
        return RtlsimDevice.generate(graph, root, DeviceOptions(numerics=numerics, muf=muf, cache_slots=cache_slots,
                                                                max_in_flight=max_in_flight))
    if backend == "pynq":
        from .pynq import PynqDevice

        where = bitstream if bitstream is not None else project_dir
        if where is None:
            raise AmpHlsError("--backend pynq needs --project DIR (a generated project or an `amp-hls deploy` "
                              "folder) or --bitstream PATH (the generated <name>.bit)")
        return PynqDevice(where)
    raise AmpHlsError(f"unknown device backend {backend!r}; available: {', '.join(BACKENDS)}")


class DeviceTrainer(TrainerBase):
    """Host nodes and the parameter server here, device nodes on ``backend`` (always fixed point)."""

    def __init__(
        self,
        entry: ModelSpec,
        config: TrainConfig,
        backend: str = "numpy-device",
        n_sync: int = 1,
        splits: Splits | None = None,
        project_dir: Path | None = None,
        timeout: float = 30.0,
        bitstream: Path | None = None,
        device: Device | None = None,
        cache_slots: int | None = None,
        max_recoveries: int = 3,
    ):
        if config.sync:
            raise AmpHlsError("a device trains asynchronously; --sync is a CPU-runtime baseline")
        if config.numerics != "fixed":
            raise AmpHlsError("a device computes in fixed point: use --numerics fixed")
        super().__init__(entry, config, splits)
        self.backend = backend
        self.n_sync = n_sync
        self.numerics = config.numeric_config()
        self.placement = place(self.graph)
        init = Engine(self.graph, self.numerics, seed=config.seed, members=self.placement.device_nodes)
        initial = {n: dict(k.params) for n, k in init.kernels.items() if isinstance(k, ParamKernel)}
        # The sizing rule: the tag tables hold mak x the most messages one instance leaves at a
        # node (a loop leaves one per trip: up to 20 in the zoo's lists), counted on the data.
        self.per_instance = messages_per_instance(
            self.placement, [self.entry.inputs(e) for e in self.splits.train[:SAMPLE]])
        if cache_slots is None:
            cache_slots = max(64, config.mak * self.per_instance)
        self.device = device if device is not None else make_device(
            backend, self.graph, self.placement, self.numerics, config.muf, project_dir, cache_slots, bitstream,
            max_in_flight=config.mak,
        )
        settings = self.device.settings
        if settings is not None:  # what the device was generated for must be this run's
            check_run(settings, self.numerics, config.muf, config.mak, self.per_instance)
        self.server = ParameterServer(self.placement, self.numerics, config.optimizer, initial, config.muf, n_sync)
        self.device.send(self.server.weights_messages())
        self.runner = HostRunner(self.placement, self.device, self.numerics, seed=config.seed, timeout=timeout,
                                 on_grads=lambda m: self.server.apply(m, self.device.send), check_status=True)
        self.timeout = timeout
        self.max_recoveries = max_recoveries
        self.faults: list[dict[str, Any]] = []  # every device fault recovered from
        self.eval_engine = Engine(self.graph, self.numerics, train=False, max_batch=1024)
        self.rng = np.random.default_rng(config.seed + 2)

    def train_epoch(self, progress: Callable[[int], None] | None = None) -> tuple[float, float]:
        order = self.rng.permutation(len(self.splits.train))
        examples = [self.splits.train[i] for i in order]
        start = time.perf_counter()
        chunk = max(1, self.config.mak * 8)  # progress updates without slowing the loop
        for lo in range(0, len(examples), chunk):
            part = examples[lo : lo + chunk]
            self._run([self.entry.inputs(e) for e in part])
            if progress is not None:
                progress(len(part))
        self.train_s += time.perf_counter() - start
        self.instances += len(examples)
        self.epoch += 1
        return self.metrics(self.runner.drain_losses())

    def _run(self, instances: list) -> None:
        """The runner on ``instances``; a device fault is recovered from (``recover``) up to
        ``max_recoveries`` times in the run, and training goes on."""
        while True:
            try:
                self.runner.run(instances, mak=self.config.mak)
                return
            except DeviceError as exc:
                if len(self.faults) >= self.max_recoveries or not self.recover(exc):
                    raise
                instances = []  # those not admitted yet are still queued in the runner

    def recover(self, exc: DeviceError) -> bool:
        """After a device error: the device's soft reset (its kernels emptied, weights kept), the
        instances in flight dropped on the host as on the device, the server's weights sent
        again (a WEIGHTS message may have been in a FIFO the reset emptied). False when the
        device cannot be reset (it does not answer): the error stands."""
        try:
            status, dropped_messages, after = self.device.recover(min(self.timeout, 10.0))
        except DeviceError:
            return False
        lost = self.runner.abandon()
        self.device.send(self.server.weights_messages())
        for m in after:
            self.runner._route(m)
        self.faults.append({
            "epoch": self.epoch,
            "error": str(exc),
            "status": self.device.describe(status) if status is not None else None,
            "instances_dropped": lost,
            "messages_dropped": dropped_messages,
        })
        return True

    def evaluate(self, examples: Sequence[Example]) -> Evaluation:
        """The numpy fixed-point forward on the weights the device last received."""
        for name, params in self.server.params().items():
            kernel = self.eval_engine.kernels[name]
            assert isinstance(kernel, ParamKernel)
            kernel.load_quantized({k: quantize(v, self.numerics.weights) for k, v in params.items()})
        i = 0
        while i < len(examples) or self.eval_engine.active_keys:
            while i < len(examples) and self.eval_engine.active_keys < 1024:
                self.eval_engine.inject(i, self.entry.inputs(examples[i]))
                i += 1
            self.eval_engine.run()
        loss, metric = self.metrics(drain_losses(self.eval_engine))
        return Evaluation(loss, metric, len(examples))

    def fit(self, checkpoint: Path | None = None, **kwargs: Any) -> list:  # type: ignore[override]
        """As ``TrainerBase.fit``; if the device fails, the server's state is saved first."""
        try:
            return super().fit(checkpoint=checkpoint, **kwargs)
        except DeviceError:
            if checkpoint is not None:
                self.save(checkpoint)
            raise

    def parameters(self) -> dict[str, dict[str, np.ndarray]]:
        return self.server.params()

    def save(self, path: Path) -> None:
        """The parameter server's masters and optimizer state (npz + JSON, no pickle)."""
        arrays = {f"param/{n}/{t}": v for n, ps in self.server.params().items() for t, v in ps.items()}
        arrays.update(self.server.optimizer.state_arrays())
        meta = {"model": self.entry.name, "backend": self.backend, "epoch": self.epoch,
                "updates": self.server.dumps, "optimizer_steps": self.server.optimizer.steps}
        write_checkpoint(path, arrays, meta)

    def _details(self) -> dict[str, Any]:
        problems = self.runner.host.conservation_report()
        return {
            "n_sync": self.n_sync,
            "conservation_ok": not problems,
            "conservation_problems": problems,
            "staleness": {n: {"mean": s.staleness.mean, "max": s.staleness.max, "count": s.staleness.count}
                          for n, s in self.server.nodes.items()},
            "grads_dumps": self.server.dumps,
            "device": asdict(self.device.counters),
            "faults": list(self.faults),
            "instances_dropped": self.runner.dropped,
            "messages_per_instance": self.per_instance,
            "device_loss_reports": dict(self.runner.loss_reports),
        }

