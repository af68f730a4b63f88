"""Training through the simulated board: the PYNQ driver (host/pynq.py) with PYNQ's DMA semantics
(host/pynq_sim.py) over the rtl flow's bitstream contents (``amp_board``: amp_top with its FIFOs
at the depths the Vivado project instantiates, and amp_pack) under Verilator.

    python -m bench.board_training                         # mlp and list-rnn, target 0.90
    python -m bench.board_training --models list-rnn --mak 8 --epochs 4

Each model's project is generated as ``amp-hls generate MODEL --mak N`` writes it (the model's
muf, the tag tables sized for N instances in flight) and trained at exactly those settings, the
host's numerics fixed point, until the validation accuracy reaches ``--target`` or ``--epochs``.
The simulation is slow (a list-rnn epoch is hundreds of millions of clock cycles): this is a
measurement, not a test; ``tests/test_board_training.py`` runs the mlp case. Results:
``bench/results/board_training.json`` (test accuracy, epochs, wall time, simulated cycles).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from amp_hls.cli import main as amp_hls
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.host.rtlsim import RtlsimDevice
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.models import MODELS
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig

RESULTS = Path(__file__).resolve().parent / "results" / "board_training.json"


def train(model: str, mak: int | None, epochs: int, target: float, root: Path) -> dict:
    spec = MODELS[model]
    project = root / model
    args = ["generate", model, "-o", str(project), "--force"] + (["--mak", str(mak)] if mak else [])
    assert amp_hls(args) == 0
    manifest = json.loads((project / "manifest.json").read_text())
    start = time.perf_counter()
    far = RtlsimDevice(project, board=True)
    build_s = time.perf_counter() - start
    device = PynqDevice(project, pynq=SimPynq(far, dma_name="dma"), timeout=120.0)
    config = TrainConfig(mak=manifest["max_in_flight"], muf=manifest["muf"], epochs=epochs, numerics="fixed",
                         target=target, optimizer=OptimizerConfig("adam", lr=spec.defaults.get("lr", 1e-3)))
    trainer = DeviceTrainer(spec, config, backend="pynq", device=device, timeout=120.0)
    start = time.perf_counter()
    trainer.fit()
    summary = trainer.summary()
    result = {
        "model": model, "mak": config.mak, "muf": config.muf, "cache_slots": manifest["cache_slots"],
        "fifo_depths": manifest["fifo_depths"], "target": target, "epochs": summary["epochs"],
        "val_metric": trainer.history[-1].val_metric, "test_metric": summary["test_metric"],
        "conservation_ok": summary["conservation_ok"], "train_s": summary["wall_s"],
        "wall_s": time.perf_counter() - start, "build_s": build_s, "cycles": far.cycles,
        "sim_cpu_s": far.sim_cpu_s, "instances_per_s": summary["instances_per_s"],
        "faults": summary["faults"], "device": summary["device"],
    }
    far.close()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["mlp", "list-rnn"])
    ap.add_argument("--mak", type=int, help="instances in flight the bitstream is generated for (default: the model's)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--target", type=float, default=0.90)
    ap.add_argument("--root", type=Path, default=Path("build") / "board_training")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for model in args.models:
        result = train(model, args.mak, args.epochs, args.target, args.root)
        results[model] = result
        print(f"{model}: test accuracy {result['test_metric']:.4f} after {result['epochs']} epochs "
              f"(mak {result['mak']}, muf {result['muf']}, {result['cache_slots']} cache slots), "
              f"{result['train_s']:.0f} s, {result['cycles']:,} cycles, conservation "
              f"{'ok' if result['conservation_ok'] else 'FAILED'}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
