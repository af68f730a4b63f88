"""Your model from a Python file: the file is imported (it is your code, run on purpose; nothing
is unpickled) and its ``model()`` function must return a ``ModelSpec`` (docs/your-model.md).

Wherever a zoo name is accepted, ``path/to/model.py`` is too; the file may read data next to it
with ``Path(__file__).parent``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from pathlib import Path

from ..errors import AmpHlsError
from .spec import ModelSpec

MODEL_FUNCTION = "model"  # the entry point a model file defines: model() -> ModelSpec


def load_model_file(path: str | Path) -> ModelSpec:
    """Import ``path`` and return what its ``model()`` returns, checked to be a ``ModelSpec``."""
    path = Path(path)
    if not path.is_file():
        raise AmpHlsError(f"model file {path} does not exist")
    # a private module name per file, so two model files never replace each other
    name = "amp_hls_model_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise AmpHlsError(f"model file {path} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and typing look their module up while it runs
    try:
        module_spec.loader.exec_module(module)
        entry = getattr(module, MODEL_FUNCTION, None)
        if not callable(entry):
            raise AmpHlsError(f"model file {path} defines no {MODEL_FUNCTION}() function; it must define "
                              f"one returning an amp_hls.ModelSpec (docs/your-model.md)")
        spec = entry()
    except AmpHlsError:
        sys.modules.pop(name, None)
        raise
    except Exception as exc:  # the user's code failed: where, and how, in one line
        sys.modules.pop(name, None)
        raise AmpHlsError(f"model file {path}{_line(exc, path)}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(spec, ModelSpec):
        raise AmpHlsError(f"model file {path}: {MODEL_FUNCTION}() returned {type(spec).__name__}, "
                          "not an amp_hls.ModelSpec")
    return spec


def _line(exc: BaseException, path: Path) -> str:
    """`` line N`` of ``path`` where ``exc`` was raised (its innermost frame there), if any."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f" line {exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    return f" line {frames[-1].lineno}" if frames else ""
