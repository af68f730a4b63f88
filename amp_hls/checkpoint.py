"""Checkpoint files: one ``.npz`` of plain arrays plus a JSON string, never pickle.

Written to a temporary name and renamed, so a crash mid-write never leaves half a checkpoint;
read with ``allow_pickle=False``, and any defect is an ``AmpHlsError`` naming the file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .errors import AmpHlsError


def write_checkpoint(path: str | Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays, meta=np.array(json.dumps(meta)))
    tmp.replace(path)


def read_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise AmpHlsError(f"cannot read checkpoint {path}: {exc}") from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
        if not isinstance(meta, dict):
            raise TypeError("metadata is not a JSON object")
    except (KeyError, TypeError, ValueError) as exc:
        raise AmpHlsError(f"checkpoint {path} has no valid metadata: {exc}") from None
    return arrays, meta
