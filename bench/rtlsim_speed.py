"""Simulation speed of the rtlsim device: clock cycles per second while a zoo model trains on it.

    python -m bench.rtlsim_speed                       # mlp, 200 instances, mak 1
    python -m bench.rtlsim_speed --model mlp --instances 500 --mak 4

One epoch over the first ``--instances`` training examples runs on the Verilator model of the
generated design (forward, backward, gradient dumps, weight pushes: the real traffic), then the
same epoch on the C simulation, side by side in one process. It prints the clock cycles the RTL
took, the cycles per second inside the simulator (per CPU second of the C++ clock loop, which a
busy shared machine does not distort, and per wall second) and end to end (host, wire encoding
and all), and instances/s of both backends with their ratio. The
projects are generated under ``--out`` (default ``build/``), so a rerun reuses the Verilator
build.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from amp_hls.datasets import Splits
from amp_hls.host.rtlsim import RtlsimDevice
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.models import MODELS
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig


def epoch(model: str, backend: str, splits: Splits, mak: int, root: Path) -> tuple[DeviceTrainer, float]:
    """One training epoch on ``backend``; the trainer and its wall time (device build excluded)."""
    entry = MODELS[model]
    config = TrainConfig(mak=mak, muf=entry.defaults.get("muf", 8), epochs=1, numerics="fixed",
                         optimizer=OptimizerConfig("adam", lr=entry.defaults.get("lr", 1e-3)))
    trainer = DeviceTrainer(entry, config, backend, splits=splits, project_dir=root / f"{model}_{backend}")
    start = time.perf_counter()
    trainer.train_epoch()
    return trainer, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--instances", type=int, default=200)
    p.add_argument("--mak", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("build"))
    args = p.parse_args(argv)

    full = MODELS[args.model].data(0)
    splits = Splits(full.name, full.train[: args.instances], full.val[:1], full.test[:1])
    n = len(splits.train)
    rtl, rtl_s = epoch(args.model, "rtlsim", splits, args.mak, args.out)
    device = rtl.device
    assert isinstance(device, RtlsimDevice)
    cycles, sim_s, sim_cpu_s = device.cycles, device.sim_s, device.sim_cpu_s
    device.close()
    _, csim_s = epoch(args.model, "csim", splits, args.mak, args.out)
    print(f"{args.model}, {n} instances, mak {args.mak}: {cycles} clock cycles "
          f"({cycles / n:.0f} per instance)")
    print(f"rtlsim: {cycles / sim_cpu_s:,.0f} cycles per CPU second in the simulator "
          f"({cycles / sim_s:,.0f} per wall second; {sim_s:.2f} s), "
          f"{cycles / rtl_s:,.0f} cycles/s end to end ({rtl_s:.2f} s)")
    print(f"instances/s: rtlsim {n / rtl_s:.0f}, csim {n / csim_s:.0f} (rtlsim/csim {csim_s / rtl_s:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
