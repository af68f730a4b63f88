"""Every node kind against one table of single-node cases.

For each case: the analytical backward matches central finite differences (float64), fixed point
stays within its rounding / lookup-table bound of float, every forward message gets exactly one
gradient and the caches drain, and inference caches nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from amp_hls.ir import Graph, S, Value, inc, push
from amp_hls.kernels import Kernel, LinearKernel, LossKernel
from amp_hls.kinds import make_kernel
from amp_hls.message import Direction, Message, Tag, bwd, fwd
from amp_hls.numerics import FLOAT64 as F64
from amp_hls.numerics import (
    NumericConfig,
    activation_table,
    ce_error_bound,
    dequantize,
    lut_error_bound,
    quantize,
)
from tests.helpers import FIXED

NODE = "nd"  # every case names the node under test this
T = Tag(7, (1,))


@dataclass
class Case:
    """A validated graph around node ``nd`` and real-valued inputs ``(port, tag, payload)``.

    Index payloads are int64 and get no finite differences (their gradient must be zero).
    """

    graph: Graph
    inputs: list[tuple[int, Tag, np.ndarray]]

    def kernel(self, numerics: NumericConfig) -> Kernel:
        return make_kernel(self.graph.node(NODE), self.graph, numerics)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _sinks(g: Graph, *values: Value) -> Graph:
    for v in values:
        g.sink(v)
    g.validate()
    return g


def _uniform(rows: int, width: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).uniform(-1, 1, (rows, width))


def _away_from_zero(rows: int, width: int) -> np.ndarray:
    """relu's kink is at 0: keep finite differences on one side of it."""
    r = _rng(1)
    return r.choice([-1.0, 1.0], (rows, width)) * r.uniform(0.1, 1.0, (rows, width))



def linear_case() -> Case:
    g = Graph("t")
    _sinks(g, g.linear(g.source("x", 3, max_rows=4), 2, name=NODE))
    return Case(g, [(0, T, _uniform(4, 3))])


def activation_case(fn: str) -> Callable[[], Case]:
    def build() -> Case:
        g = Graph("t")
        _sinks(g, g.activation(g.source("x", 5, max_rows=3), fn, name=NODE))
        x = _away_from_zero(3, 5) if fn == "relu" else 2 * _uniform(3, 5)
        return Case(g, [(0, T, x)])

    return build


def join_case(op: str, widths: tuple[int, ...]) -> Callable[[], Case]:
    def build() -> Case:
        g = Graph("t")
        srcs = [g.source(f"x{i}", w, max_rows=2) for i, w in enumerate(widths)]
        _sinks(g, getattr(g, op)(*srcs, name=NODE))
        return Case(g, [(i, T, _uniform(2, w, seed=i)) for i, w in enumerate(widths)])

    return build


def split_case() -> Case:
    g = Graph("t")
    _sinks(g, *g.split(g.source("x", 5, max_rows=2), (2, 3), name=NODE))
    return Case(g, [(0, T, _uniform(2, 5))])


def broadcast_case() -> Case:
    g = Graph("t")
    _sinks(g, *g.broadcast(g.source("x", 3, max_rows=2), 3, name=NODE))
    return Case(g, [(0, T, _uniform(2, 3))])


EDGES = np.array([[0, 1], [1, 0], [2, 0], [2, 2], [0, 1], [3, 2]], dtype=np.int64)


def aggregate_case() -> Case:
    g = Graph("t")
    x = g.source("x", 3, max_rows=5)
    e = g.source("e", 2, max_rows=8, dtype="index")
    _sinks(g, g.aggregate(x, e, name=NODE))
    return Case(g, [(0, T, _uniform(4, 3)), (1, T, EDGES)])


def rowsum_case() -> Case:
    g = Graph("t")
    _sinks(g, g.rowsum(g.source("x", 3, max_rows=4), name=NODE))
    return Case(g, [(0, T, _uniform(4, 3))])


def ungroup_case() -> Case:
    g = Graph("t")
    _sinks(g, g.ungroup(g.source("x", 3, max_rows=4), name=NODE))
    return Case(g, [(0, T, _uniform(4, 3))])


def group_case() -> Case:
    g = Graph("t")
    _sinks(g, g.group(g.source("x", 3), 4, name=NODE))
    x = _uniform(4, 3)
    order = [2, 0, 3, 1]  # rows arrive out of order
    return Case(g, [(0, Tag(7, (1, i, 4)), x[i : i + 1]) for i in order])


def cond_case(state: tuple[int, ...]) -> Callable[[], Case]:
    def build() -> Case:
        g = Graph("t")
        _sinks(g, *g.cond(g.source("x", 3, max_rows=2), S[0] < 3, name=NODE))
        return Case(g, [(0, Tag(7, state), _uniform(2, 3))])

    return build


def phi_case() -> Case:
    g = Graph("t")
    _sinks(g, g.phi(g.source("a", 3), g.source("b", 3), name=NODE))
    return Case(g, [(1, T, _uniform(1, 3)), (0, Tag(8, (1,)), _uniform(1, 3, seed=2))])


def isu_case() -> Case:
    g = Graph("t")
    _sinks(g, g.isu(g.source("x", 3, max_rows=2), inc(0), push(5), name=NODE))
    return Case(g, [(0, T, _uniform(2, 3))])


def loss_case(fn: str) -> Callable[[], Case]:
    def build() -> Case:
        g = Graph("t")
        p = g.source("p", 4, max_rows=3)
        if fn == "mse":
            t = g.source("target", 4, max_rows=3)
            target = _uniform(3, 4, seed=5)
        else:
            t = g.source("target", 1, max_rows=3, dtype="index")
            target = np.array([[0], [3], [2]], dtype=np.int64)
        g.loss(p, t, fn, name=NODE)
        g.validate()
        return Case(g, [(0, T, 2 * _uniform(3, 4)), (1, T, target)])

    return build


CASES: dict[str, Callable[[], Case]] = {
    "linear": linear_case,
    "relu": activation_case("relu"),
    "tanh": activation_case("tanh"),
    "sigmoid": activation_case("sigmoid"),
    "add3": join_case("add", (4, 4, 4)),
    "mul2": join_case("mul", (4, 4)),
    "mul3": join_case("mul", (4, 4, 4)),
    "concat": join_case("concat", (2, 3, 1)),
    "split": split_case,
    "broadcast": broadcast_case,
    "aggregate": aggregate_case,
    "rowsum": rowsum_case,
    "ungroup": ungroup_case,
    "group": group_case,
    "cond_true": cond_case((1,)),
    "cond_false": cond_case((4, 2)),
    "phi": phi_case,
    "isu": isu_case,
    "mse": loss_case("mse"),
    "softmax_ce": loss_case("softmax_ce"),
}


# --- driving a kernel ------------------------------------------------------------------------


def messages(case: Case, kernel: Kernel, key_offset: int = 0) -> list[tuple[int, Message]]:
    """The case's inputs in the kernel's numeric format (index payloads untouched)."""
    out = []
    for port, tag, x in case.inputs:
        if kernel.in_specs[port].dtype == "index":
            payload = x
        elif kernel.fixed:
            payload = quantize(x, kernel.numerics.data)
        else:
            payload = x.astype(kernel.dtype)
        out.append((port, fwd(Tag(tag.key + key_offset, tag.state), payload)))
    return out


def by_port(msgs: list[tuple[int, Message]]) -> dict[int, list[Message]]:
    """Messages grouped per port, arrival order kept: one batch per port."""
    batches: dict[int, list[Message]] = {}
    for port, m in msgs:
        batches.setdefault(port, []).append(m)
    return batches


def drive(
    kernel: Kernel, msgs: list[tuple[int, Message]], train: bool, batched: bool = False
) -> list[tuple[int, Message]]:
    """Forward every message, one call each or one call per port."""
    if batched:
        return [e for port, ms in by_port(msgs).items() for e in kernel.forward(port, ms, train)]
    return [e for port, m in msgs for e in kernel.forward(port, [m], train)]


def forward_outputs(emits: list[tuple[int, Message]]) -> dict[tuple[int, Tag], np.ndarray]:
    return {(p, m.tag): m.payload for p, m in emits if m.direction == Direction.FWD}


Upstream = Callable[[tuple[int, Tag], tuple[int, ...]], np.ndarray]


def run_train(
    kernel: Kernel, msgs: list[tuple[int, Message]], upstream: Upstream, batched: bool = False
) -> tuple[dict, dict, dict]:
    """Forward in training, answer output ``key`` with ``upstream(key, shape)``.

    Returns the outputs, the upstream gradients and the input gradients, each keyed by
    ``(port, tag)``, and checks conservation on the way: exactly one gradient per forward input,
    on the same port with the same tag, and empty caches afterwards.
    """
    emits = drive(kernel, msgs, train=True, batched=batched)
    outs = forward_outputs(emits)
    r = {key: upstream(key, y.shape) for key, y in outs.items()}
    grads = [(p, m) for p, m in emits if m.direction == Direction.BWD]
    answers = [(port, bwd(tag, g)) for (port, tag), g in r.items()]
    if batched:
        for port, ms in by_port(answers).items():
            grads += kernel.backward(port, ms)
    else:
        for port, m in answers:
            grads += kernel.backward(port, [m])
    assert all(m.direction == Direction.BWD for _, m in grads)
    assert sorted((p, m.tag) for p, m in grads) == sorted((p, m.tag) for p, m in msgs)
    assert kernel.pending() == 0
    return outs, r, {(p, m.tag): m.payload for p, m in grads}


def objective(kernel: Kernel, msgs: list[tuple[int, Message]], r: dict) -> float:
    """``sum(output * R)`` over every output, or the loss (inference mode: nothing is cached)."""
    if isinstance(kernel, LossKernel):
        before = len(kernel.results)
        drive(kernel, msgs, train=False)
        return sum(rec.loss for rec in kernel.results[before:])
    outs = forward_outputs(drive(kernel, msgs, train=False))
    assert set(outs) == set(r)
    return float(sum(np.sum(y * r[key]) for key, y in outs.items()))


def numeric_gradient(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of ``f`` with respect to ``x``, perturbed in place and restored."""
    g = np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        hi = f()
        x[idx] = old - eps
        lo = f()
        x[idx] = old
        g[idx] = (hi - lo) / (2 * eps)
    return g


# --- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_finite_differences(name: str) -> None:
    case = CASES[name]()
    kernel = case.kernel(F64)
    if isinstance(kernel, LinearKernel):
        kernel.set_params({k: _rng(3).normal(size=v.shape) for k, v in kernel.params.items()})
    msgs = messages(case, kernel)
    rng = _rng(4)
    _, r, grads = run_train(kernel, msgs, lambda key, shape: rng.normal(size=shape))
    for port, m in msgs:
        analytic = grads[(port, m.tag)]
        assert analytic.shape == m.payload.shape
        assert analytic.dtype == np.float64
        if kernel.in_specs[port].dtype == "index" or (isinstance(kernel, LossKernel) and port == 1):
            assert not analytic.any()  # labels, edges and loss targets are not differentiated
            continue
        numeric = numeric_gradient(lambda: objective(kernel, msgs, r), m.payload)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)
    if isinstance(kernel, LinearKernel):
        analytic_params = kernel.grads_as_float()
        for key in list(kernel.params):
            value = kernel.params[key].copy()

            def f(key: str = key, value: np.ndarray = value) -> float:
                kernel.set_params({key: value})
                return objective(kernel, msgs, r)

            numeric = numeric_gradient(f, value)
            np.testing.assert_allclose(analytic_params[key], numeric, rtol=1e-6, atol=1e-9)


def _tolerances(name: str) -> tuple[float, float]:
    """Worst forward / backward error of fixed against float on inputs already on the grid."""
    lsb_d, lsb_g = FIXED.data.lsb, FIXED.grads.lsb
    if name in ("tanh", "sigmoid"):
        e = lut_error_bound(activation_table(name, FIXED.data))
        # the slope from the table's y is off by <= 2e + e^2 plus one round_shift; |dy| <= 2
        return e, 2 * (2 * e + e * e + lsb_d) + lsb_g / 2
    if name == "softmax_ce":  # the exp/log tables (numerics.loss_tables): their bound
        return lsb_d / 2, ce_error_bound(FIXED, 4)[0]
    if name in ("linear", "mul2", "mse"):
        return lsb_d / 2, lsb_g / 2  # one rounding each way
    if name == "mul3":  # a narrowed partial product (|x| <= 1) then the output rounding
        return lsb_d, 2 * lsb_d + lsb_g / 2
    return 0.0, 0.0  # routing and exact integer sums


@pytest.mark.parametrize("name", CASES)
def test_fixed_matches_float(name: str) -> None:
    case = CASES[name]()
    fx, fl = case.kernel(FIXED), case.kernel(F64)
    if isinstance(fx, LinearKernel):
        fx.set_params({k: _rng(3).uniform(-1, 1, v.shape) for k, v in fx.params.items()})
        fl.set_params({k: dequantize(v, FIXED.weights) for k, v in fx.qparams.items()})
    msgs_fx = messages(case, fx)
    msgs_fl = [
        (p, fwd(m.tag, m.payload if fx.in_specs[p].dtype == "index" else dequantize(m.payload, FIXED.data)))
        for p, m in msgs_fx
    ]
    rng = _rng(4)
    outs_fx, r_fx, grads_fx = run_train(
        fx, msgs_fx, lambda key, shape: quantize(rng.uniform(-2, 2, shape), FIXED.grads)
    )
    outs_fl, _, grads_fl = run_train(
        fl, msgs_fl, lambda key, shape: dequantize(r_fx[key], FIXED.grads)
    )
    tol_fwd, tol_bwd = _tolerances(name)
    assert set(outs_fx) == set(outs_fl)
    for key, y in outs_fx.items():
        assert y.dtype == np.int64
        np.testing.assert_allclose(dequantize(y, FIXED.data), outs_fl[key], rtol=0, atol=tol_fwd + 1e-12)
    for key, dx in grads_fx.items():
        assert dx.dtype == np.int64
        np.testing.assert_allclose(dequantize(dx, FIXED.grads), grads_fl[key], rtol=0, atol=tol_bwd + 1e-12)
    if isinstance(fx, LossKernel):
        assert isinstance(fl, LossKernel)
        tol = ce_error_bound(FIXED, 4)[1] * 3 if name == "softmax_ce" else 1e-12  # 3 rows a message
        assert [r.loss for r in fx.results] == pytest.approx([r.loss for r in fl.results], abs=tol)
    assert fx.counter.total == 0  # everything in range: nothing saturates


def _upstream_grads(key: tuple[int, Tag], shape: tuple[int, ...]) -> np.ndarray:
    """A gradient that depends only on the output it answers, not on the order of answering."""
    port, tag = key
    rng = np.random.default_rng([port, tag.key, *tag.state])
    return quantize(rng.uniform(-2, 2, shape), FIXED.grads)


@pytest.mark.parametrize("name", CASES)
def test_batching_does_not_change_results(name: str) -> None:
    """Three instances one message per call, then one call per port: identical integers."""
    case = CASES[name]()
    results = []
    for batched in (False, True):
        kernel = case.kernel(FIXED)
        msgs = [pm for k in range(3) for pm in messages(case, kernel, key_offset=100 * k)]
        outs, _, grads = run_train(kernel, msgs, _upstream_grads, batched=batched)
        params = kernel.grads if isinstance(kernel, LinearKernel) else {}
        results.append((outs, grads, params, kernel.counter.as_dict()))
    (outs_a, grads_a, params_a, sat_a), (outs_b, grads_b, params_b, sat_b) = results
    assert outs_a.keys() == outs_b.keys() and grads_a.keys() == grads_b.keys()
    for a, b in [(outs_a, outs_b), (grads_a, grads_b), (params_a, params_b)]:
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert sat_a == sat_b


@pytest.mark.parametrize("name", CASES)
def test_inference_caches_nothing(name: str) -> None:
    case = CASES[name]()
    kernel = case.kernel(FIXED)
    msgs = [pm for k in range(2) for pm in messages(case, kernel, key_offset=100 * k)]
    emits = drive(kernel, msgs, train=False)
    assert kernel.pending() == 0
    assert all(m.direction == Direction.FWD for _, m in emits)
    trained = case.kernel(FIXED)
    expected = forward_outputs(drive(trained, msgs, train=True))
    got = forward_outputs(emits)
    assert got.keys() == expected.keys()
    for key in got:
        np.testing.assert_array_equal(got[key], expected[key])
