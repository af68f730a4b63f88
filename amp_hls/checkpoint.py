"""Checkpoint files: one ``.npz`` of plain arrays plus a JSON string, never pickle.

Written to a temporary file created exclusively (``O_EXCL``: never through a planted symlink, never
over anybody's file) in the target's own directory and renamed over the target, so a crash
mid-write never leaves half a checkpoint. Read with ``allow_pickle=False``, and only what
``write_checkpoint`` writes is accepted: stored (uncompressed) zip entries of plain numeric arrays
and one JSON string, each entry's declared size checked against what the file holds before it is
loaded. ``Contents`` then checks every array's name, shape, dtype and finiteness and every counter
against what its reader expects, before anything is loaded. Any defect is an ``AmpHlsError``
naming the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import tokenize
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import AmpHlsError
from .interrupts import interrupts_deferred

META = "meta"  # the entry holding the JSON metadata
PLAIN_KINDS = "biuf"  # bool, integers, floats: what a checkpoint's arrays may hold
MAX_COUNT = 1 << 53  # counters stay exact in JSON readers that use doubles
ZIP_FLAGS = 0x08 | 0x800  # the zip entry flags np.savez may set: a data descriptor, UTF-8 names


def write_checkpoint(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Whole or not at all; a SIGINT meanwhile is delivered once the file is in place (or gone)."""
    with interrupts_deferred():
        _write(Path(path), arrays, meta)


def _write(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise AmpHlsError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays, **{META: np.array(json.dumps(meta))})
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # what a plain new file would get
        os.replace(tmp, path)  # replaces a symlink at ``path`` itself, never its target
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise AmpHlsError(f"cannot write checkpoint {path}: {exc.strerror or exc}") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the metadata of the checkpoint at ``path``."""
    try:
        _check_entries(Path(path))
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AmpHlsError(f"cannot read checkpoint {path}: {why}") from None
    try:
        meta = json.loads(str(arrays.pop(META)))
        if not isinstance(meta, dict):
            raise TypeError("metadata is not a JSON object")
    except (KeyError, TypeError, ValueError, RecursionError) as exc:
        raise AmpHlsError(f"checkpoint {path} has no valid metadata: {exc}") from None
    for name, value in arrays.items():
        if value.dtype.kind not in PLAIN_KINDS:
            raise AmpHlsError(f"checkpoint {path}: array {name!r} holds {value.dtype}, not numbers")
    return arrays, meta


def _check_entries(path: Path) -> None:
    """Only stored ``.npy`` entries, each declaring no more data than it holds (so that loading
    allocates no more than the file's size), and one 0-d string: the metadata."""
    size = path.stat().st_size
    names = set()
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"entry {info.filename!r} is not a stored .npy array")
            if info.flag_bits & ~ZIP_FLAGS:  # encrypted, patched, ...: nothing np.savez writes
                raise ValueError(f"entry {info.filename!r} uses zip features a checkpoint never has")
            if info.filename in names or info.file_size > size:
                raise ValueError(f"entry {info.filename!r} is repeated or larger than the file")
            names.add(info.filename)
            with archive.open(info) as f:
                version = np.lib.format.read_magic(f)
                try:  # numpy parses the header as a Python literal
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                except (SyntaxError, tokenize.TokenError, TypeError, KeyError) as exc:
                    raise ValueError(f"entry {info.filename!r} has a damaged header ({type(exc).__name__})") from None
            meta = info.filename == f"{META}.npy"
            if dtype.hasobject or dtype.kind not in (PLAIN_KINDS + "U" if meta else PLAIN_KINDS):
                raise ValueError(f"entry {info.filename!r} holds {dtype}, not numbers")
            if math.prod(shape) * dtype.itemsize > info.file_size or (meta and shape != ()):
                raise ValueError(f"entry {info.filename!r} declares more data than it holds")


class Contents:
    """A checkpoint's arrays and metadata, each taken through a check naming the file and the
    entry: ``array`` (name, shape, kind, finite), ``counter``/``counters`` (integers in range),
    ``number`` (finite), ``only`` (no arrays besides the expected ones)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.arrays, self.meta = read_checkpoint(path)

    def error(self, what: str) -> AmpHlsError:
        return AmpHlsError(f"checkpoint {self.path}: {what}")

    def array(self, name: str, shape: tuple[int, ...], kinds: str = "f") -> np.ndarray:
        """The array ``name``, of exactly ``shape``, its dtype of one of ``kinds``, finite."""
        value = self.arrays.get(name)
        if value is None:
            raise self.error(f"has no array {name!r}")
        if value.dtype.kind not in kinds:
            raise self.error(f"array {name!r} holds {value.dtype}, expected "
                             + ("floats" if kinds == "f" else "integers" if kinds == "i" else f"kind {kinds}"))
        if value.shape != tuple(shape):
            raise self.error(f"array {name!r} has shape {value.shape}, expected {tuple(shape)}")
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise self.error(f"array {name!r} holds NaN or inf")
        return value

    def only(self, expected: Iterable[str]) -> None:
        extra = sorted(set(self.arrays) - set(expected))
        if extra:
            raise self.error(f"has unexpected array(s) {', '.join(map(repr, extra[:5]))}"
                             + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""))

    def field(self, key: str, kind: type | tuple[type, ...]) -> Any:
        value = self.meta.get(key)
        if not isinstance(value, kind):
            raise self.error(f"metadata {key!r} is {_show(value)}, not a {_kind_name(kind)}")
        return value

    def counter(self, key: str, lo: int = 0, hi: int = MAX_COUNT) -> int:
        """The integer ``meta[key]``, in ``[lo, hi]``."""
        return self._integer(repr(key), self.meta.get(key), lo, hi)

    def _integer(self, what: str, value: Any, lo: int, hi: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise self.error(f"metadata {what} is {_show(value)}, not an integer in [{lo}, {hi}]")
        return value

    def counters(self, key: str, names: Iterable[str], lo: int = 0, hi: int = MAX_COUNT,
                 every: bool = True) -> dict[str, int]:
        """``meta[key]``: an integer in ``[lo, hi]`` for each of ``names`` (``every``: exactly
        those; otherwise some of them)."""
        doc = self.field(key, dict)
        names = set(names)
        if (set(doc) != names) if every else not set(doc) <= names:
            raise self.error(f"metadata {key!r} names {sorted(map(str, doc))[:8]}, expected "
                             f"{'' if every else 'some of '}{sorted(names)[:8]}")
        return {n: self._integer(f"{key!r}[{n!r}]", v, lo, hi) for n, v in doc.items()}

    def number(self, key: str, lo: float = 0.0) -> float:
        value = self.meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < lo:
            raise self.error(f"metadata {key!r} is {_show(value)}, not a finite number of at least {lo:g}")
        return float(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"dict": "JSON object", "list": "JSON list", "str": "string"}.get(k.__name__, k.__name__)
                       for k in kinds)
