"""`amp-hls deploy PROJECT -o DIR`: one folder to copy onto the board, and training from it.

No board here: the bitstream files are stand-ins, and the folder's training runs against the
simulated PYNQ (host/pynq_sim.py) with the project's C simulation as the fabric, through the very
entry points a user runs on the board (`run.py train`, `amp-hls train --backend pynq --project DIR`).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import amp_hls.host.pynq as pynq_driver
from amp_hls.cli import main
from amp_hls.codegen.project import open_project
from amp_hls.config import load_config
from amp_hls.host.csim import CsimDevice
from amp_hls.host.pynq_sim import SimPynq


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """An mlp project (rtl flow) whose bitstream 'was built' (stand-in files)."""
    root = tmp_path_factory.mktemp("deploy") / "mlp"
    assert main(["generate", "mlp", "-o", str(root), "--mak", "8", "--muf", "4"]) == 0
    (root / "mlp.bit").write_bytes(b"\x00stand-in bitstream")
    (root / "mlp.hwh").write_text("<stand-in hardware handoff/>")
    return root


def test_deploy_needs_a_built_board_project_and_a_new_folder(tmp_path, capsys):
    assert main(["generate", "mlp", "-o", str(tmp_path / "p")]) == 0
    assert main(["deploy", str(tmp_path / "p"), "-o", str(tmp_path / "d")]) == 2
    assert "has no mlp.bit: build it first (make -C" in capsys.readouterr().err
    assert main(["deploy", str(tmp_path / "nowhere"), "-o", str(tmp_path / "d")]) == 2
    assert "not an amp-hls project" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    (tmp_path / "p" / "mlp.bit").write_text("x")
    (tmp_path / "p" / "mlp.hwh").write_text("x")
    assert main(["deploy", str(tmp_path / "p"), "-o", str(tmp_path / "full")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "full" / "x").read_text() == "mine"


def test_the_folder_holds_everything_the_board_needs(built, tmp_path):
    out = tmp_path / "mlp-deploy"
    assert main(["deploy", str(built), "-o", str(out)]) == 0
    for f in ("mlp.bit", "mlp.hwh", "manifest.json", "graph.json", "amp-hls.toml", "run.py", "requirements.txt",
              "README.md", "amp_hls/__init__.py", "amp_hls/_data/templates/deploy/run.py.j2",
              "amp_hls/_data/hw/include/amp_stream.h"):
        assert (out / f).is_file(), f
    assert os.access(out / "run.py", os.X_OK)
    assert (out / "mlp.bit").read_bytes() == (built / "mlp.bit").read_bytes()
    manifest = json.loads((out / "manifest.json").read_text())
    config = load_config(out / "amp-hls.toml")  # the run the bitstream was generated for
    assert config.training["muf"] == manifest["muf"] == 4 and config.training["mak"] == manifest["max_in_flight"] == 8
    assert config.training["numerics"] == "fixed" and str(config.precision["data"]) == "Q16.10"
    reqs = (out / "requirements.txt").read_text()
    assert "numpy" in reqs and "scikit-learn" in reqs  # amp-hls's own, and what the digits data needs
    readme = (out / "README.md").read_text()
    assert "sudo pip3 install -r requirements.txt" in readme and "python3 run.py train" in readme
    assert "no board" in readme.lower()
    # amp-hls runs from the folder alone: its own copy, its own templates
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import amp_hls.resources as r; print(r.templates_dir())"
    run = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == str(out / "amp_hls" / "_data" / "templates"), run.stderr


@pytest.mark.gxx
def test_training_from_the_folder_on_a_simulated_board(built, tmp_path, monkeypatch, capsys):
    out = tmp_path / "mlp-deploy"
    assert main(["deploy", str(built), "-o", str(out)]) == 0
    far = CsimDevice(open_project(built))  # the fabric: the project's C simulation
    monkeypatch.setattr(pynq_driver, "import_pynq", lambda: SimPynq(far, dma_name="dma"))
    summary = tmp_path / "summary.json"
    entry = runpy.run_path(str(out / "run.py"), run_name="deployed")
    assert entry["main"](["train", "--epochs", "1", "--quiet", "--json", str(summary), "--no-target"]) == 0
    result = json.loads(summary.read_text())
    assert result["backend"] == "pynq" and result["conservation_ok"] and result["test_metric"] > 0.5
    assert entry["main"](["check"]) == 0 and "device status: no error" in capsys.readouterr().out
    # the same through the command line, and a setting the bitstream cannot run is refused
    far.reset()
    assert main(["train", "mlp", "--backend", "pynq", "--project", str(out), "--config", str(out / "amp-hls.toml"),
                 "--epochs", "1", "--quiet", "--no-target"]) == 0
    assert main(["train", "mlp", "--backend", "pynq", "--project", str(out), "--numerics", "fixed",
                 "--mak", "8", "--muf", "8", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "setting muf: the bitstream" in err and "train with --muf 4" in err
