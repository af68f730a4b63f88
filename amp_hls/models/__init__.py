"""The model zoo. Every module of this package that defines ``ENTRIES`` (a list of
``ModelEntry``) joins the zoo, so adding a model never means editing a shared registry."""

from __future__ import annotations

import importlib
import pkgutil

from .inputs import Inputs
from .list_rnn import build_list_rnn, list_rnn_inputs
from .mlp import build_mlp, mlp_inputs
from .zoo import METRICS, ModelEntry


def _discover() -> dict[str, ModelEntry]:
    found: dict[str, ModelEntry] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for entry in getattr(module, "ENTRIES", ()):
            if entry.name in found:
                raise RuntimeError(f"model {entry.name!r} is defined twice in the zoo")
            found[entry.name] = entry
    return found


MODELS: dict[str, ModelEntry] = _discover()

__all__ = ["METRICS", "MODELS", "Inputs", "ModelEntry", "build_list_rnn", "build_mlp", "list_rnn_inputs", "mlp_inputs"]
