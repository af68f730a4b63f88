"""Training state read back from a checkpoint, every part checked before any of it is used:
parameters, optimizer moments and step counts, and the history (``checkpoint.Contents`` does the
checking; this module knows what a trainer's and a server's checkpoints hold).

A poisoned file would otherwise train quietly into nonsense (NaN weights, a step count of -1 in
Adam's bias correction) or crash mid-run on a wrong shape, so each reader here refuses it, naming
the file and the entry.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..checkpoint import MAX_COUNT, Contents
from .optim import MOMENTS
from .trainer import EpochRecord

Shapes = dict[str, dict[str, tuple[int, ...]]]  # node -> tensor -> shape


def read_params(contents: Contents, shapes: Shapes) -> dict[str, dict[str, np.ndarray]]:
    """``param/<node>/<tensor>`` for every tensor of ``shapes``: floats of that shape, finite."""
    return {n: {t: np.array(contents.array(f"param/{n}/{t}", shape)) for t, shape in ts.items()}
            for n, ts in shapes.items()}


def param_names(shapes: Shapes) -> set[str]:
    return {f"param/{n}/{t}" for n, ts in shapes.items() for t in ts}


def stored_moments(contents: Contents) -> set[str]:
    """The moment names a checkpoint's optimizer arrays use (``{"m", "v"}`` for Adam's)."""
    return {name.rsplit(".", 1)[-1] for name in contents.arrays if name.startswith("opt/")}


def read_optimizer_state(contents: Contents, kind: str, shapes: Shapes) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The ``opt/<node>/<tensor>.<moment>`` arrays of optimizer ``kind`` and the per-node step
    counts (``optimizer_steps``). A node has moments exactly when it has stepped, and then all of
    them, each of its tensor's shape and finite (Adam's second moment non-negative)."""
    moments = MOMENTS[kind]
    steps = contents.counters("optimizer_steps", shapes, every=False)
    arrays: dict[str, np.ndarray] = {}
    for node, tensors in shapes.items():
        stepped = steps.get(node, 0) > 0
        for tensor, shape in tensors.items():
            for moment in moments:
                name = f"opt/{node}/{tensor}.{moment}"
                if not stepped:
                    if name in contents.arrays:
                        raise contents.error(f"array {name!r} belongs to a node that never stepped")
                    continue
                value = contents.array(name, shape)
                if kind == "adam" and moment == "v" and np.any(value < 0):
                    raise contents.error(f"array {name!r} (Adam's second moment) holds negative values")
                arrays[name] = value
    extra = {n for n in contents.arrays if n.startswith("opt/")} - set(arrays)
    if extra:
        raise contents.error(f"has optimizer array(s) {sorted(extra)[:3]} that a {kind} optimizer "
                             "of this model does not keep")
    return arrays, steps


def read_history(contents: Contents) -> list[EpochRecord]:
    """``history``: records with exactly ``EpochRecord``'s fields; counts are integers, the wall
    time finite, losses and metrics numbers (NaN where nothing was measured)."""
    records = contents.field("history", list)
    fields = [f.name for f in dataclasses.fields(EpochRecord)]
    out = []
    for i, doc in enumerate(records):
        if not isinstance(doc, dict) or sorted(doc) != sorted(fields):
            raise contents.error(f"history record {i} does not have the fields {', '.join(fields)}")
        for name in fields:
            value = doc[name]
            counting = name in ("epoch", "instances")
            ok = (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT if counting
                  else isinstance(value, (int, float)) and not isinstance(value, bool)
                  and (math.isfinite(value) and value >= 0 if name == "wall_s" else not math.isinf(value)))
            if not ok:
                raise contents.error(f"history record {i}: {name} is {value!r}")
        out.append(EpochRecord(**doc))
    return out
