"""The dump engine as a generate option: recorded in the manifest, built into the RTL Linears at
parallelism above 1 only (the hls flow is refused), set from the command line or ``[device]
dump_engine``, and priced by the cycle and resource models. Its RTL is held bit-exact and timed by tests/test_rtl_linear.py
and, in a whole design, by tests/test_rtl_top.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from amp_hls import api
from amp_hls.cli import main
from amp_hls.codegen.rtl import render_kernel
from amp_hls.config import config_from_dict
from amp_hls.cycles import message_cycles
from amp_hls.cycles.folding import pin
from amp_hls.cycles.resources import kernel_resources
from amp_hls.design import DeviceOptions, build_design, has_dump_engine
from amp_hls.models import MODELS

OPTIONS = DeviceOptions(muf=64, cache_slots=16)


def test_generate_records_it_and_builds_it_into_every_linear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    assert main(["generate", "mlp", "--board", "pynq-z2", "--dump-engine", "-o", str(root)]) == 0
    capsys.readouterr()
    assert json.loads((root / "manifest.json").read_text())["dump_engine"] is True
    for node in ("fc0", "head"):
        assert "db_ram" in (root / "rtl" / f"k_{node}.sv").read_text()
    plain = tmp_path / "q"
    assert main(["generate", "mlp", "--board", "pynq-z2", "-o", str(plain)]) == 0
    capsys.readouterr()
    assert json.loads((plain / "manifest.json").read_text())["dump_engine"] is False
    assert "db_ram" not in (plain / "rtl" / "k_fc0.sv").read_text()


def test_the_hls_flow_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "mlp", "--flow", "hls", "--dump-engine", "-o", str(tmp_path / "p")]) == 2
    assert "--flow rtl" in capsys.readouterr().err
    assert not (tmp_path / "p" / "manifest.json").exists()


def test_a_config_sets_it() -> None:
    config = config_from_dict({"device": {"dump_engine": True}})
    assert api.device_options(config).dump_engine
    assert not api.device_options(config, dump_engine=False).dump_engine
    assert not api.device_options().dump_engine


def test_the_models_price_it() -> None:
    """The mlp's fc0 at P=64: a backward pays a copy of 32 words per dump instead of the dump's
    2,000-odd beats; the dump buffer costs LUT-RAM (the resource model reads it off the RTL)."""
    graph = pin(MODELS["mlp"].build(), {"fc0": 64})
    engine = dataclasses.replace(OPTIONS, dump_engine=True)
    inline_cycles = message_cycles(graph, "fc0", OPTIONS, "out0_grad", 1)
    engine_cycles = message_cycles(graph, "fc0", engine, "out0_grad", 1)
    node = graph.nodes["fc0"]
    dump = 2 + node.out_features * (node.in_features + 1) + 2  # header, state, G and the bias, 2 more
    assert inline_cycles - engine_cycles == pytest.approx((dump - node.out_features - 3) / OPTIONS.muf, abs=1)
    plain, with_engine = (kernel_resources(build_design(graph, o), "fc0") for o in (OPTIONS, engine))
    assert with_engine.lutram > plain.lutram and with_engine.lut > plain.lut


def test_a_linear_at_parallelism_1_dumps_inline() -> None:
    """Its copy would take as long as its dump: no dump buffer, the inline cycles."""
    graph = MODELS["mlp"].build()  # every Linear at parallelism 1
    engine = dataclasses.replace(OPTIONS, dump_engine=True)
    assert not has_dump_engine(1, engine) and has_dump_engine(2, engine) and not has_dump_engine(2, OPTIONS)
    assert "db_ram" not in render_kernel(build_design(graph, engine), "fc0")
    assert message_cycles(graph, "fc0", engine, "out0_grad", 1) == message_cycles(graph, "fc0", OPTIONS, "out0_grad", 1)
