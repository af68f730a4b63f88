"""Where the non-Python files live: ``templates/`` and ``hw/``.

In a wheel they are packaged under ``amp_hls/_data``; in a source checkout (editable install)
they sit at the repository root. Callers never care which.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The directory ``templates`` or ``hw``, wherever this installation keeps it."""
    if name not in ("templates", "hw"):
        raise ValueError(f"unknown data directory {name!r}")
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"amp-hls data directory {name!r} not found next to {_PACKAGE}; the installation is incomplete"
    )


def templates_dir() -> Path:
    return data_dir("templates")


def hw_dir() -> Path:
    return data_dir("hw")
