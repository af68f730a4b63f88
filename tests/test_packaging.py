"""A non-editable install must carry templates/ and hw/ (and find them at run time) and the
cocotb drivers in amp_hls/sim/."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_templates_and_hw_and_uses_them(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    wheel = next(tmp_path.glob("amp_hls-*.whl"))
    import amp_hls

    assert wheel.name.startswith(f"amp_hls-{amp_hls.__version__}-")  # the version's one definition
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "amp_hls/py.typed" in names  # type hints are part of the API
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    for template in (ROOT / "templates").rglob("*.j2"):
        assert f"amp_hls/_data/templates/{template.relative_to(ROOT / 'templates').as_posix()}" in names
    assert "amp_hls/_data/hw/README.md" in names
    assert "amp_hls/_data/templates/testbench/amp_top_tb.py" in names  # the bench write_testbench copies
    for driver in ("axis.py", "runner.py"):  # and the cocotb drivers it imports
        assert f"amp_hls/sim/{driver}" in names

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    probe = (
        "import amp_hls.resources as r, amp_hls.codegen as c;"
        "print(r.templates_dir());"
        "assert 'BEAT_BITS' in c.render_wire_header()"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert str(target) in run.stdout  # the wheel's own copy, not the checkout's


def test_the_public_names_resolve_and_load_their_modules_on_first_use():
    """``import amp_hls`` loads no part of the package (a cocotb run that needs amp_hls.wire does
    not pay for the API), and every public name resolves to what its module defines."""
    probe = (
        "import sys, amp_hls as amp;"
        "loaded = sorted(m for m in sys.modules if m.startswith('amp_hls.') and m != 'amp_hls.version');"
        "assert not loaded, loaded;"
        "from amp_hls.ir import Graph;"
        "assert amp.Graph is Graph and 'amp_hls.api' not in sys.modules;"
        "assert all(getattr(amp, n) is not None for n in amp.__all__);"
        "assert sorted(amp.__all__) == sorted(['__version__', *amp._WHERE]) == sorted(dir(amp));"
        "from amp_hls import *;"
        "assert TrainConfig is amp.TrainConfig"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    import amp_hls

    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        amp_hls.not_a_name  # noqa: B018
