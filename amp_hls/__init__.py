"""amp-hls: asynchronous model-parallel training of dynamic neural networks, from numpy to HLS
C++ and RTL. The public API (docs/your-model.md)::

    import amp_hls as amp

    g = amp.Graph("my_model")               # the graph builder (amp_hls.ir)
    spec = amp.ModelSpec(...)               # the graph, and how an example feeds its sources
    trainer = amp.train(spec)               # train / evaluate / predict
    amp.generate(spec, "build/my_model")    # generate / report / testbench / estimate
"""

from __future__ import annotations

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
from .config import RunConfig, config_from_dict, load_config  # noqa: E402
from .datasets import NO_LABEL, Example, Splits, load_dataset, load_examples, split  # noqa: E402
from .design import DeviceOptions  # noqa: E402
from .distributed import DistributedOptions  # noqa: E402
from .errors import AmpHlsError  # noqa: E402
from .ir import Graph, S, dec, inc, parent, pop, push  # noqa: E402
from .models import MODELS, Feed, ModelSpec, label_row, rows  # noqa: E402
from .numerics import NumericConfig, Precision  # noqa: E402
from .runtime.infer import Prediction, Predictor  # noqa: E402
from .runtime.optim import OptimizerConfig  # noqa: E402
from .runtime.trainer import EpochRecord, Evaluation, TrainConfig  # noqa: E402
from .version import __version__

__all__ = [
    "MODELS", "NO_LABEL", "AmpHlsError", "DeviceOptions", "DistributedOptions", "EpochRecord", "Evaluation", "Example",
    "Feed", "Graph", "ModelSpec", "NumericConfig", "OptimizerConfig", "Precision", "Prediction", "Predictor",
    "RunConfig", "S", "Splits", "TrainConfig", "__version__", "config_from_dict", "dec", "device_options",
    "estimate", "estimate_json", "evaluate", "fit", "format_report", "generate", "inc", "label_row",
    "load_config", "load_dataset", "load_examples", "load_model", "load_predictor", "parent", "pop",
    "predict", "predictor", "push", "report", "report_json", "resolve_graph", "rows", "split", "testbench",
    "train", "train_distributed", "trainer_for", "training_config",
]
