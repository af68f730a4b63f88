"""Your data from a file: JSON lines, CSV or npz, read into ``Example``s and split.

Every format gives each example the same shape: ``Example(data, label)`` with ``data`` a dict of
named fields (numpy arrays) and ``label`` the integer in a field called ``label`` (``NO_LABEL``
when there is none, e.g. for regression, where the target is a field like any other). A field
called ``split`` (``train``, ``val`` or ``test``) places an example; without one, the examples are
shuffled with the seed and cut 70/15/15. A model's feeds read the fields they need
(docs/your-model.md, Data files).

- ``.jsonl``: one JSON object per line; every key but ``label`` and ``split`` is a field, its
  value a number or a (nested) list of numbers: lists of different lengths from line to line are
  what lists, trees and graphs need (``{"tokens": [3, 1, 2], "label": 3}``).
- ``.csv``: a header row, then one example per row; every column but ``label`` and ``split``
  is a number, and together, in order, they make the one field ``features`` (a 1-D array).
- ``.npz``: arrays of equal length along their first axis, one entry per example; every array
  but ``label`` and ``split`` is a field (``x[i]`` for example ``i``). Fixed shapes only (no
  pickle, so no ragged arrays): use JSON lines for those.
"""

from __future__ import annotations

import csv
import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import AmpHlsError
from .base import Example, Splits, split

DATA_FORMATS = (".jsonl", ".csv", ".npz")
SPLIT_NAMES = ("train", "val", "test")
NO_LABEL = -1  # the label of an example whose file gives none
CSV_FIELD = "features"  # the field a CSV row's numbers make


def load_dataset(path: str | Path, seed: int = 0) -> Splits:
    """The examples of ``path``, split by their ``split`` field or else 70/15/15 with ``seed``."""
    path = Path(path)
    records = _read(path)
    marked = [s for _, s in records if s is not None]
    if marked and len(marked) != len(records):
        first = next(i for i, (_, s) in enumerate(records) if s is None)
        raise AmpHlsError(f"data file {path}: example {first} has no 'split' while others do: give every "
                          "example one, or none (then they are split 70/15/15 by the seed)")
    examples = [e for e, _ in records]
    if marked:
        parts = {name: [e for e, s in records if s == name] for name in SPLIT_NAMES}
        splits = Splits(path.stem, parts["train"], parts["val"], parts["test"], f"{path} (split as marked)")
    else:
        splits = split(path.stem, examples, seed, description=f"{path} (shuffled with seed {seed}, 70/15/15)")
    empty = [name for name, part in zip(SPLIT_NAMES, (splits.train, splits.val, splits.test)) if not part]
    if empty:
        raise AmpHlsError(f"data file {path}: no {' or '.join(empty)} examples among {len(examples)}: "
                          "give more examples, or a 'split' field naming train, val and test")
    return splits


def load_examples(path: str | Path) -> list[Example]:
    """Every example of ``path`` in file order, whatever its split (what ``predict`` reads)."""
    return [e for e, _ in _read(Path(path))]


def _read(path: Path) -> list[tuple[Example, str | None]]:
    if path.suffix not in DATA_FORMATS:
        raise AmpHlsError(f"data file {path}: unknown format {path.suffix or '(no suffix)'!r}; "
                          f"use {', '.join(DATA_FORMATS)}")
    if not path.is_file():
        raise AmpHlsError(f"data file {path} does not exist")
    reader = {".jsonl": _read_jsonl, ".csv": _read_csv, ".npz": _read_npz}[path.suffix]
    records = reader(path)
    if not records:
        raise AmpHlsError(f"data file {path} holds no examples")
    return records


def _record(fields: dict[str, Any], where: str) -> tuple[Example, str | None]:
    """An example from a record's fields: ``label`` and ``split`` taken out, the rest arrays."""
    fields = dict(fields)
    label = fields.pop("label", NO_LABEL)
    if isinstance(label, np.ndarray):
        label = label.item() if label.ndim == 0 else label
    if isinstance(label, float) and label.is_integer():
        label = int(label)
    if not isinstance(label, (int, np.integer)) or isinstance(label, bool):
        raise AmpHlsError(f"{where}: 'label' must be an integer class, got {label!r}")
    part = fields.pop("split", None)
    if isinstance(part, np.ndarray):
        part = str(part)
    if part is not None and part not in SPLIT_NAMES:
        raise AmpHlsError(f"{where}: 'split' must be one of {', '.join(SPLIT_NAMES)}, got {part!r}")
    data = {}
    for name, value in fields.items():
        try:
            array = np.asarray(value)
        except ValueError:  # ragged: rows of different lengths inside one field
            array = np.asarray(None)
        if array.dtype.kind not in "iuf" or (array.dtype.kind == "f" and not np.all(np.isfinite(array))):
            raise AmpHlsError(f"{where}: field {name!r} must be finite numbers or lists of them (rows "
                              f"of equal length within one field), got {_short(value)}")
        data[name] = array
    return Example(data, int(label)), part


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_jsonl(path: Path) -> list[tuple[Example, str | None]]:
    out = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"data file {path} line {number}"
            try:
                doc = json.loads(line, parse_constant=lambda c: math.nan)
            except json.JSONDecodeError as exc:
                raise AmpHlsError(f"{where}: not JSON: {exc.msg}") from None
            if not isinstance(doc, dict):
                raise AmpHlsError(f"{where}: each line must be a JSON object, got {type(doc).__name__}")
            out.append(_record(doc, where))
    return out


def _read_csv(path: Path) -> list[tuple[Example, str | None]]:
    out = []
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise AmpHlsError(f"data file {path}: no header row")
        header = [h.strip() for h in header]
        columns = [i for i, h in enumerate(header) if h not in ("label", "split")]
        for number, row in enumerate(reader, 2):
            if not row:
                continue
            where = f"data file {path} line {number}"
            if len(row) != len(header):
                raise AmpHlsError(f"{where}: {len(row)} values for {len(header)} columns")
            try:
                features = [float(row[i]) for i in columns]
            except ValueError:
                bad = next(i for i in columns if not _is_number(row[i]))
                raise AmpHlsError(f"{where}: column {header[bad]!r} is {row[bad]!r}, not a number") from None
            fields: dict[str, Any] = {CSV_FIELD: features}
            for name in ("label", "split"):
                if name in header:
                    value = row[header.index(name)].strip()
                    fields[name] = value if name == "split" else _label(value, where)
            out.append(_record(fields, where))
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _label(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise AmpHlsError(f"{where}: 'label' must be an integer class, got {text!r}") from None


def _read_npz(path: Path) -> list[tuple[Example, str | None]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise AmpHlsError(f"data file {path}: not a readable npz without pickle: {exc}") from None
    if not arrays:
        return []
    lengths = {k: (v.shape[0] if v.ndim else None) for k, v in arrays.items()}
    n = lengths[next(iter(lengths))]
    if n is None or any(m != n for m in lengths.values()):
        raise AmpHlsError(f"data file {path}: every array needs one entry per example along its first "
                          f"axis; lengths differ: {', '.join(f'{k} ({m})' for k, m in lengths.items())}")
    return [_record({k: v[i] for k, v in arrays.items()}, f"data file {path} example {i}") for i in range(n)]
