"""pytest configuration for tests/; plain helpers shared by several modules are in tests/helpers.py.

Tiers: a test that needs a tool carries its marker (registered in pyproject.toml): ``gxx`` (g++
builds: the C simulation, generated headers), ``verilator`` (cocotb benches, rtlsim), ``mpi``
(mpiexec), ``torch`` (PyTorch), ``yosys`` (synthesis); a long pure-Python test carries ``slow``.
``make test`` runs everything, ``make test-fast`` only what carries none of them.

Order: the modules run longest first (``FILE_SECONDS``, each module's seconds measured on this
project's machines), so that on several pytest-xdist workers (``--dist loadfile
--no-loadscope-reorder``: whole modules, in this order) no long module starts last while the
other workers have run out of work. ``--record-file-seconds`` writes those seconds afresh
(``make test-durations``); a module not listed goes last.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

FILE_SECONDS = Path(__file__).with_name("file_seconds.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-file-seconds", metavar="PATH", default=None,
                     help="write each test module's seconds (setup, call and teardown summed) to PATH as json")


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest modules first, each module's tests in their own order (the sort is stable)."""
    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}
    items.sort(key=lambda item: -seconds.get(_module(item.nodeid), 0.0))


_spent: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[_module(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--record-file-seconds")
    worker = hasattr(session.config, "workerinput")  # on xdist the controller sees every report
    if path and not worker and _spent:
        Path(path).write_text(json.dumps({m: round(s, 1) for m, s in _spent.most_common()}, indent=1) + "\n")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``gxx`` test skips where there is no g++, as the C-simulation modules' own ``skipif`` do."""
    if item.get_closest_marker("gxx") is not None and shutil.which("g++") is None:
        pytest.skip("needs g++")
