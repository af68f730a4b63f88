"""The native runtime in float: float32 training within rounding of the numpy runtime's, and in
float64 check mode the accumulated gradients equal to 1e-9 (the same serving order, different
summation orders inside the matrix products), in float32 to rounding."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from amp_hls.message import MAX_STATE_WORDS
from amp_hls.models import MODELS
from amp_hls.native import NativeTrainer
from amp_hls.native.library import NativeRun
from amp_hls.numerics import FLOAT64, NumericConfig
from amp_hls.runtime.engine import Engine
from amp_hls.runtime.optim import OptimizerConfig
from amp_hls.runtime.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.gxx


def test_float32_training_within_rounding() -> None:
    spec = MODELS["mlp"]
    full = spec.splits(0)
    splits = dataclasses.replace(full, train=full.train[:200], val=full.val[:40], test=full.test[:40])
    config = TrainConfig(mak=16, muf=4, epochs=1, optimizer=OptimizerConfig(kind="adam", lr=3e-3))
    a, b = Trainer(spec, config, splits), NativeTrainer(spec, config, splits)
    (loss_a, acc_a), (loss_b, acc_b) = a.train_epoch(), b.train_epoch()
    assert loss_b == pytest.approx(loss_a, rel=1e-5) and acc_a == acc_b
    pa, pb = a.parameters(), b.parameters()
    for node, tensors in pa.items():
        for t, value in tensors.items():
            np.testing.assert_allclose(pb[node][t], value, atol=1e-5, err_msg=f"{node}.{t}")


@pytest.mark.parametrize(("model", "numerics", "rtol"), [
    *((model, FLOAT64, 1e-9) for model in ("mlp", "list-rnn", "tree-rnn", "ggsnn-qm9", "ggsnn-babi15", "ggsnn-babi19")),
    # float32: the register-tiled products (fused multiply-adds) and the vectorised tanh and
    # sigmoid against numpy's BLAS, exp and tanh (5e-7 apart when measured)
    ("ggsnn-qm9", NumericConfig("float"), 1e-5),
])
def test_gradients_match(model: str, numerics: NumericConfig, rtol: float) -> None:
    """No update (muf beyond the instances): every gradient the epoch accumulates, per node,
    within ``rtol`` of numpy's (relative to the tensor's largest gradient)."""
    spec = MODELS[model]
    graph = spec.build()
    examples = spec.splits(0).train[:40]
    numpy_engine = Engine(graph, numerics, seed=3)
    native = NativeRun(graph, numerics, OptimizerConfig(), mak=8, muf=10**6, sync=False, max_batch=256)
    for p, name in enumerate(native.native.param_nodes):
        for t, value in numpy_engine.kernels[name].params.items():  # type: ignore[attr-defined]
            native.tensor(p, t, 0)[...] = value
        native.params_changed(p)
    feeds = [spec.inputs(e) for e in examples]
    for s, name in enumerate(native.native.source_nodes):
        payloads = [np.asarray(f[name][1], dtype=np.float64) for f in feeds]
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in payloads])])
        states = np.zeros((len(feeds), MAX_STATE_WORDS), dtype=np.uint16)
        for i, f in enumerate(feeds):
            states[i, : len(f[name][0])] = f[name][0]
        native.set_data(s, np.concatenate(payloads), offsets, states, np.array([len(f[name][0]) for f in feeds]))
    native.epoch_begin(np.arange(len(examples)))
    assert native.epoch_run(len(examples) + 1) == len(examples)
    for key, f in enumerate(feeds):  # the numpy engine, one instance at a time, in the same order
        numpy_engine.inject(key, f)
        numpy_engine.run()
    for p, name in enumerate(native.native.param_nodes):
        for t, grad in numpy_engine.kernels[name].grads.items():  # type: ignore[attr-defined]
            scale = float(np.max(np.abs(grad)))
            assert scale > 0, f"{name}.{t}: no gradient reached it"
            np.testing.assert_allclose(native.tensor(p, t, 1), grad, rtol=rtol, atol=rtol * scale, err_msg=f"{name}.{t}")
