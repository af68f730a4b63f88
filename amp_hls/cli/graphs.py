"""``amp-hls models | summary | export``: the model zoo and graph documents."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import AmpHlsError
from ..ir import GraphCore, load, save
from ..models import MODELS


def resolve_graph(spec: str) -> GraphCore:
    """A zoo model name, or a path to a graph JSON document."""
    if spec in MODELS:
        return MODELS[spec].build()
    if spec.endswith(".json") or Path(spec).exists():
        return load(spec)
    raise AmpHlsError(f"{spec!r} is neither a model ({', '.join(MODELS)}) nor a graph JSON file")


def cmd_models(args: argparse.Namespace) -> int:
    width = max(map(len, MODELS))
    for name, entry in MODELS.items():
        print(f"{name:{width}s}  {entry.description}")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    print(resolve_graph(args.model).summary())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    save(resolve_graph(args.model), args.output)
    print(f"wrote {args.output}")
    return 0
