"""The one Jinja environment every generator uses: strict, so a missing value is an error."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from ..resources import templates_dir
from ..toolchain import user_cache_dir
from ..version import __version__

OPTIONS: dict[str, Any] = {
    "undefined": jinja2.StrictUndefined,
    "keep_trailing_newline": True,
    "trim_blocks": True,
    "lstrip_blocks": True,
    "autoescape": False,  # C++/SV/tcl, not HTML; user names are validated identifiers instead
}


class _BestEffortCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between processes (compiling them is about 0.7 s of every
    ``amp-hls generate``); a cache that cannot be written is no cache, never an error."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def bytecode_dir() -> Path:
    """``$XDG_CACHE_HOME/amp-hls/jinja`` (else ``~/.cache``), one folder per amp-hls version and
    environment options: Jinja keys its cache by template source only, not by the options the
    code was compiled with."""
    key = hashlib.sha256(f"{__version__} {jinja2.__version__} {sorted(OPTIONS.items(), key=str)}".encode())
    return user_cache_dir("jinja") / key.hexdigest()[:16]


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = bytecode_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _BestEffortCache(str(folder))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                              bytecode_cache=_bytecode_cache(), **OPTIONS)
