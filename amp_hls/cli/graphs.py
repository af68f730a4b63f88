"""``amp-hls models | summary | export``: the model zoo and graph documents. A model is named as
``api.load_model`` takes it (a zoo name or a model file), a graph as ``api.resolve_graph`` does
(those, or a graph ``.json``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..api import MODEL_SUFFIX, load_model, resolve_graph
from ..errors import AmpHlsError
from ..ir import save
from ..models import MODELS

MODEL_HELP = "zoo model name or model file (path/to/model.py defining model(): docs/your-model.md)"
GRAPH_HELP = "zoo model name, model file (path/to/model.py) or graph .json file"


def model_argument(text: str) -> str:
    """argparse's check of a model argument: a zoo name or a model file that exists (imported
    later, by the command: an unknown name fails as a usage error, listing the zoo)."""
    if text in MODELS or (text.endswith(MODEL_SUFFIX) and Path(text).is_file()):
        return text
    try:
        load_model(text)  # says what is wrong: an unknown name, or a missing file
    except AmpHlsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


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
