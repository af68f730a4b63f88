"""amp-hls: asynchronous model-parallel training of dynamic neural networks, from numpy to HLS
C++ and RTL. The public API (docs/your-model.md)::

    import amp_hls as amp

    g = amp.Graph("my_model")               # the graph builder (amp_hls.ir)
    spec = amp.ModelSpec(...)               # the graph, and how an example feeds its sources
    trainer = amp.train(spec)               # train / evaluate / predict
    amp.generate(spec, "build/my_model")    # generate / report / testbench / estimate
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

# Each public name and the module that defines it, imported on first use (PEP 562): a process that
# needs one part (a cocotb testbench importing amp_hls.wire, an MPI rank, the CLI) does not pay
# for importing the whole package (0.5 s a cocotb run).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "api": ("device_options", "estimate", "estimate_json", "evaluate", "fit", "format_report", "generate", "load_model", "load_predictor", "predict", "predictor", "report", "report_json", "resolve_graph", "testbench", "train", "train_distributed", "trainer_for", "training_config"),
    "config": ("RunConfig", "config_from_dict", "load_config"),
    "datasets": ("Example", "NO_LABEL", "Splits", "load_dataset", "load_examples", "split"),
    "design": ("DeviceOptions",),
    "distributed": ("DistributedOptions",),
    "errors": ("AmpHlsError",),
    "ir": ("Graph", "S", "dec", "inc", "parent", "pop", "push"),
    "models": ("Feed", "MODELS", "ModelSpec", "label_row", "rows"),
    "numerics": ("NumericConfig", "Precision"),
    "runtime.infer": ("Prediction", "Predictor"),
    "runtime.optim": ("OptimizerConfig",),
    "runtime.trainer": ("EpochRecord", "Evaluation", "TrainConfig"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [
    "MODELS", "NO_LABEL", "AmpHlsError", "DeviceOptions", "DistributedOptions", "EpochRecord", "Evaluation", "Example",
    "Feed", "Graph", "ModelSpec", "NumericConfig", "OptimizerConfig", "Precision", "Prediction", "Predictor",
    "RunConfig", "S", "Splits", "TrainConfig", "__version__", "config_from_dict", "dec", "device_options",
    "estimate", "estimate_json", "evaluate", "fit", "format_report", "generate", "inc", "label_row",
    "load_config", "load_dataset", "load_examples", "load_model", "load_predictor", "parent", "pop",
    "predict", "predictor", "push", "report", "report_json", "resolve_graph", "rows", "split", "testbench",
    "train", "train_distributed", "trainer_for", "training_config",
]

if TYPE_CHECKING:
    from .api import (
        device_options,
        estimate,
        estimate_json,
        evaluate,
        fit,
        format_report,
        generate,
        load_model,
        load_predictor,
        predict,
        predictor,
        report,
        report_json,
        resolve_graph,
        testbench,
        train,
        train_distributed,
        trainer_for,
        training_config,
    )
    from .config import RunConfig, config_from_dict, load_config
    from .datasets import NO_LABEL, Example, Splits, load_dataset, load_examples, split
    from .design import DeviceOptions
    from .distributed import DistributedOptions
    from .errors import AmpHlsError
    from .ir import Graph, S, dec, inc, parent, pop, push
    from .models import MODELS, Feed, ModelSpec, label_row, rows
    from .numerics import NumericConfig, Precision
    from .runtime.infer import Prediction, Predictor
    from .runtime.optim import OptimizerConfig
    from .runtime.trainer import EpochRecord, Evaluation, TrainConfig


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'amp_hls' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
