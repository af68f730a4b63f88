"""The model zoo, and the model specification every model (zoo or yours) is written in.

Every module of this package that defines ``ENTRIES`` (a list of ``ModelSpec``) joins the zoo,
so adding a model never means editing a shared registry.
"""

from __future__ import annotations

import importlib
import pkgutil

from .inputs import Inputs
from .list_rnn import build_list_rnn
from .mlp import build_mlp
from .spec import METRICS, Feed, FeedError, ModelSpec, Rows, label_row, rows, state_problem


def _discover() -> dict[str, ModelSpec]:
    found: dict[str, ModelSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for entry in getattr(module, "ENTRIES", ()):
            if entry.name in found:
                raise RuntimeError(f"model {entry.name!r} is defined twice in the zoo")
            found[entry.name] = entry
    return found


MODELS: dict[str, ModelSpec] = _discover()

__all__ = ["METRICS", "MODELS", "Feed", "FeedError", "Inputs", "ModelSpec", "Rows", "build_list_rnn", "build_mlp",
           "label_row", "rows", "state_problem"]
