"""Linear: the one parameterised node kind, and the template for any future one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import GraphCore, Linear
from ..message import Direction, Message
from ..numerics import (
    NumericConfig,
    SaturationCounter,
    dequantize,
    narrow,
    quantize,
    saturate_acc,
)
from .base import (
    Emit,
    Kernel,
    StalenessStats,
    TagCache,
    split_rows,
    stack_rows,
    tags_of,
)
from .common import check_grads, check_inputs


class ParamKernel(Kernel):
    """A node with trainable tensors: fp32 masters, gradient accumulators, a version counter.

    In fixed mode the forward and backward use quantised copies of the masters (weights
    precision) and gradients accumulate exactly in 48-bit integers at ``numerics.grad_acc_frac``
    fraction bits: what a device parameter node holds and dumps as GRADS.
    """

    def __init__(self, node, graph, numerics, counter=None, rng=None):  # type: ignore[no-untyped-def]
        super().__init__(node, graph, numerics, counter)
        self.params: dict[str, np.ndarray] = {}
        self.version = 0
        self.n_grads = 0
        self.staleness = StalenessStats()
        self.init_params(rng if rng is not None else np.random.default_rng(0))
        self.zero_grads()

    def init_params(self, rng: np.random.Generator) -> None:
        raise NotImplementedError

    @property
    def master_dtype(self) -> np.dtype:
        return np.dtype(np.float64 if self.numerics.float_dtype == "float64" else np.float32)

    def set_params(self, params: dict[str, np.ndarray]) -> None:
        """Replace the master tensors (e.g. after an optimizer step) and bump the version."""
        for key, value in params.items():
            if key not in self.params or np.shape(value) != self.params[key].shape:
                raise self.error(f"parameter {key!r} of shape {np.shape(value)} does not fit")
            self.params[key] = np.asarray(value, dtype=self.master_dtype).copy()
        self.version += 1
        self._requantize()

    def load_quantized(self, qparams: dict[str, np.ndarray], version: int | None = None) -> None:
        """Install fixed-point weights as a device does when a WEIGHTS message arrives."""
        if not self.fixed:
            raise self.error("quantised weights only exist in fixed-point mode")
        wp = self.numerics.weights
        for key, value in qparams.items():
            if key not in self.params or np.shape(value) != self.params[key].shape:
                raise self.error(f"parameter {key!r} of shape {np.shape(value)} does not fit")
            if np.any(value < wp.qmin) or np.any(value > wp.qmax):
                raise self.error(f"parameter {key!r} holds values outside {wp}")
        self.qparams = {k: np.asarray(v, dtype=np.int64).copy() for k, v in qparams.items()}
        self.params = {k: dequantize(v, wp).astype(self.master_dtype) for k, v in self.qparams.items()}
        self.version = self.version + 1 if version is None else version

    def _requantize(self) -> None:
        if self.fixed:
            wp = self.numerics.weights
            self.qparams = {k: quantize(v, wp, self.counter, self.site(f"{k}.q")) for k, v in self.params.items()}

    def zero_grads(self) -> None:
        dtype = np.int64 if self.fixed else self.master_dtype
        self.grads = {k: np.zeros(v.shape, dtype=dtype) for k, v in self.params.items()}
        self.n_grads = 0

    def grads_as_float(self) -> dict[str, np.ndarray]:
        """The accumulated gradients as real numbers (fixed accumulators scaled back)."""
        if not self.fixed:
            return {k: v.copy() for k, v in self.grads.items()}
        scale = float(1 << self.numerics.grad_acc_frac)
        return {k: v.astype(np.float64) / scale for k, v in self.grads.items()}


class LinearKernel(ParamKernel):
    """``skip_dx``: set by the numpy device model on a Linear fed by a host source
    (``design.skips_dx``), which runs no dx loop, as the hardware does. Its engine still sees one
    backward per forward on the edge (an all-zero gradient, never sent: the device drops it)."""

    kind = "linear"
    same_keys = True
    node: Linear
    skip_dx = False

    def __init__(
        self,
        node: Linear,
        graph: GraphCore,
        numerics: NumericConfig,
        counter: SaturationCounter | None = None,
        rng: np.random.Generator | None = None,
    ):
        super().__init__(node, graph, numerics, counter, rng)
        self.cache = TagCache(self, "linear cache")

    def init_params(self, rng: np.random.Generator) -> None:
        n_in, n_out = self.node.in_features, self.node.out_features
        bound = np.sqrt(6.0 / (n_in + n_out))  # Glorot uniform
        self.params = {"weight": rng.uniform(-bound, bound, (n_out, n_in)).astype(self.master_dtype)}
        if self.node.bias:
            self.params["bias"] = np.zeros(n_out, dtype=self.master_dtype)
        self._requantize()

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> list[Emit]:
        check_inputs(self, port, msgs)
        x, offsets = stack_rows(msgs)
        y = self._affine(x)
        if train:
            version = self.version
            self.cache.put_all(msgs, [(part, version) for part in split_rows(x, offsets)])
        return self.emit_rows(0, tags_of(msgs), Direction.FWD, y, offsets)

    def _affine(self, x: np.ndarray) -> np.ndarray:
        if not self.fixed:
            y = x @ self.params["weight"].T
            if self.node.bias:
                y = y + self.params["bias"]
            return y.astype(self.dtype, copy=False)
        f_d = self.numerics.data.frac
        acc = x @ self.qparams["weight"].T
        if self.node.bias:
            acc = acc + (self.qparams["bias"] << f_d)
        acc = saturate_acc(acc, self.counter, self.site("acc"))
        return narrow(acc, self.numerics.weights.frac, self.numerics.data, self.counter, self.site("fwd"))

    def backward(self, port: int, msgs: Sequence[Message]) -> list[Emit]:
        check_grads(self, port, msgs)
        xs, versions = zip(*self.cache.take_all(msgs))  # type: ignore[call-overload]
        dy, splits = stack_rows(msgs)
        if [x.shape[0] for x in xs] != [b - a for a, b in zip(splits, splits[1:])]:
            m, x = next((m, x) for m, x in zip(msgs, xs) if x.shape[0] != m.rows)
            raise self.error(f"gradient of {m.rows} rows for a forward of {x.shape[0]} (tag {m.tag})")
        self.staleness.record_all([self.version - v for v in versions])
        x = xs[0] if len(xs) == 1 else np.concatenate(xs, axis=0)
        self.n_grads += len(msgs)
        if not self.fixed:
            self.grads["weight"] += dy.T @ x
            if self.node.bias:
                self.grads["bias"] += dy.sum(axis=0)
            dx = (dy @ self.params["weight"]).astype(self.dtype, copy=False)
        else:
            # Accumulators saturate once per message, so the result cannot depend on batching.
            site = self.site("grad_acc")
            for m, x_m in zip(msgs, xs):
                dy_m = m.payload
                self.grads["weight"] = saturate_acc(self.grads["weight"] + dy_m.T @ x_m, self.counter, site)
                if self.node.bias:
                    db = dy_m.sum(axis=0) << self.numerics.data.frac
                    self.grads["bias"] = saturate_acc(self.grads["bias"] + db, self.counter, site)
            if self.skip_dx:
                dx = np.zeros((dy.shape[0], self.node.in_features), dtype=np.int64)
            else:
                acc = saturate_acc(dy @ self.qparams["weight"], self.counter, self.site("bwd_acc"))
                dx = narrow(acc, self.numerics.weights.frac, self.numerics.grads, self.counter, self.site("bwd"))
        return self.emit_rows(0, tags_of(msgs), Direction.BWD, dx, splits)

    def pending(self) -> int:
        return len(self.cache)

