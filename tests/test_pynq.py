"""The PYNQ driver end to end against a simulated DMA whose far side is the C simulation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from amp_hls.codegen.project import generate_project
from amp_hls.design import DeviceOptions
from amp_hls.host import CpuDevice, DeviceError, DeviceTimeout
from amp_hls.host.csim import CsimDevice
from amp_hls.host.pynq import PynqDevice
from amp_hls.host.pynq_sim import SimPynq
from amp_hls.host.runner import HostRunner, by_channel
from amp_hls.host.trainer import DeviceTrainer
from amp_hls.kernels import LinearKernel
from amp_hls.models import MODELS
from amp_hls.runtime import Engine
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig
from tests.helpers import FIXED, run_host


@pytest.fixture(scope="module")
def mlp_project(tmp_path_factory):
    entry = MODELS["mlp"]
    graph = entry.build()
    project = generate_project(graph, tmp_path_factory.mktemp("mlp_board"), "pynq-z2", DeviceOptions(muf=4))
    return entry, graph, project


def _board(project, length_bits: int = 26, root: Path | None = None) -> tuple[PynqDevice, SimPynq]:
    """The driver on a simulated board; a DMA length other than the board file's needs a
    project copy whose manifest says so (the driver trusts the manifest, as on hardware)."""
    if root is None:
        root = project.hls.root
    if length_bits != json.loads((root / "manifest.json").read_text())["dma_length_bits"]:
        manifest = json.loads((root / "manifest.json").read_text())
        manifest["dma_length_bits"] = length_bits
        (root / "manifest.json").write_text(json.dumps(manifest))
    far = CsimDevice(project.hls)
    sim = SimPynq(far, length_bits=length_bits, dma_name="dma")
    return PynqDevice(root / f"{project.name}.bit", pynq=sim, timeout=2.0), sim


def _run(entry, graph, device, n: int = 10, mak: int = 1) -> HostRunner:
    return run_host(device, [entry.inputs(graph, e) for e in entry.data(0).train[:n]], mak, weights_of=graph)


@pytest.mark.gxx
@pytest.mark.parametrize("length_bits", [26, 15])  # 15 bits: the smallest that fits mlp's GRADS
def test_the_driver_is_bit_exact_with_the_numpy_device(mlp_project, length_bits, tmp_path):
    entry, graph, project = mlp_project
    root = tmp_path / "copy"
    shutil.copytree(project.hls.root, root, ignore=shutil.ignore_patterns("build"))
    board, sim = _board(project, length_bits, root)
    assert board.max_transfer == ((1 << length_bits) - 1) // 8 * 8
    got = _run(entry, graph, board)
    want = _run(entry, graph, CpuDevice(board.placement, FIXED, muf=4))
    assert by_channel(got.received) == by_channel(want.received)
    assert got.host.conservation_report() == []



@pytest.mark.gxx
def test_many_messages_are_chunked_into_transfers_within_the_dma_length(mlp_project, tmp_path):
    entry, graph, project = mlp_project
    root = tmp_path / "copy"
    shutil.copytree(project.hls.root, root, ignore=shutil.ignore_patterns("build"))
    board, sim = _board(project, 15, root)
    cpu = CpuDevice(board.placement, FIXED, muf=4)
    ref = Engine(graph, FIXED)
    params = {k: v.params for k, v in ref.kernels.items() if isinstance(v, LinearKernel)}
    for dev in (board, cpu):
        runner = HostRunner(dev.placement, dev, FIXED)
        runner.send_weights(params, 1)
        runner.run([entry.inputs(graph, e) for e in entry.data(0).train[:200]], mak=200)
        if dev is board:
            got = runner
    assert sim.dma.sendchannel.transfers >= 3  # ~200 forward messages of 144 bytes, 32 KiB a transfer
    assert by_channel(got.received).keys() == by_channel(runner.received).keys()
    for key, msgs in by_channel(runner.received).items():
        assert sorted(m.tag for m in by_channel(got.received)[key]) == sorted(m.tag for m in msgs)


@pytest.mark.gxx
def test_a_message_larger_than_one_transfer_is_refused(mlp_project, tmp_path):
    _, _, project = mlp_project
    root = tmp_path / "copy"
    shutil.copytree(project.hls.root, root, ignore=shutil.ignore_patterns("build"))
    with pytest.raises(DeviceError, match="beyond the DMA"):
        _board(project, 7, root)


def test_without_pynq_the_error_suggests_the_cpu_backend(mlp_project):
    try:  # pynq is an optional extra, absent from the dev environment
        import pynq  # noqa: F401
    except ImportError:
        _, _, project = mlp_project
        with pytest.raises(DeviceError, match="--backend cpu"):
            PynqDevice(project.hls.root / f"{project.name}.bit")
    else:
        pytest.skip("pynq is installed here")


def test_a_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(DeviceError, match="manifest.json"):
        PynqDevice(tmp_path / "design.bit", pynq=object())


@pytest.mark.gxx
def test_a_device_that_stops_answering_times_out_and_leaves_a_checkpoint(mlp_project, tmp_path):
    entry, graph, project = mlp_project
    board, sim = _board(project)
    config = TrainConfig(mak=4, muf=4, epochs=3, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    trainer = DeviceTrainer(entry, config, backend="pynq", device=board, timeout=2.0)
    trainer.train_epoch()  # one good epoch
    sim.dma.stall()
    ckpt = tmp_path / "after_failure.npz"
    with pytest.raises(DeviceTimeout, match="did not complete within 2.0 s"):
        trainer.fit(checkpoint=ckpt)
    with np.load(ckpt, allow_pickle=False) as data:
        assert {"param/fc0/weight", "param/head/weight", "meta"} <= set(data.files)
        np.testing.assert_array_equal(data["param/fc0/weight"], trainer.server.params()["fc0"]["weight"])


@pytest.mark.gxx
def test_mlp_trains_through_the_board_driver(mlp_project):
    entry, _, project = mlp_project
    board, _ = _board(project)
    config = TrainConfig(mak=16, muf=8, epochs=3, numerics="fixed", optimizer=OptimizerConfig("adam", lr=3e-3))
    trainer = DeviceTrainer(entry, config, backend="pynq", device=board)
    trainer.fit()
    summary = trainer.summary()
    assert summary["test_accuracy"] >= 0.9
    assert summary["conservation_ok"]
    assert summary["device"]["sent"] > 0 and summary["grads_dumps"] > 0
