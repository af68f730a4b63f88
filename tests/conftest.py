"""pytest configuration for tests/; plain helpers shared by several modules are in tests/helpers.py.

Tiers: a test that needs a tool carries its marker (registered in pyproject.toml): ``gxx`` (g++
builds: the C simulation, generated headers), ``verilator`` (cocotb benches, rtlsim), ``mpi``
(mpiexec), ``torch`` (PyTorch), ``yosys`` (synthesis); a long pure-Python test carries ``slow``.
``make test`` runs everything, ``make test-fast`` only what carries none of them.
"""

from __future__ import annotations

import shutil

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``gxx`` test skips where there is no g++, as the C-simulation modules' own ``skipif`` do."""
    if item.get_closest_marker("gxx") is not None and shutil.which("g++") is None:
        pytest.skip("needs g++")
