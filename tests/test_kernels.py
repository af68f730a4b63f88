"""Kernel behaviour the case table (test_kernels_cases.py) cannot show: exact fixed-point integers
(so a change of the rounding rule fails here), host kernels, control flow and the errors every
kernel must raise rather than silently drop, duplicate or reshape a message.

Fixed mode is the default NumericConfig("fixed"): data Q16.10, weights and grads Q16.12.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from amp_hls.errors import KernelError
from amp_hls.ir import Graph, S, Value, inc, parent, pop, push
from amp_hls.kernels import (
    ActivationKernel,
    Kernel,
    LinearKernel,
    LossKernel,
    LossRecord,
    SinkKernel,
    SourceKernel,
)
from amp_hls.kinds import make_kernel
from amp_hls.message import Direction, Message, Tag, bwd, fwd
from amp_hls.numerics import NumericConfig, Precision, SaturationCounter
from tests.helpers import FIXED

F32 = NumericConfig()
NODE = "nd"
T = Tag(1, (0,))


def i64(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def kernel(g: Graph, numerics: NumericConfig = FIXED, name: str = NODE) -> Kernel:
    g.validate()
    return make_kernel(g.node(name), g, numerics)


def unary(
    op: Callable[[Graph, Value], Value | tuple[Value, ...]],
    width: int = 3,
    max_rows: int = 4,
    dtype: str = "data",
) -> Graph:
    """source -> op -> sink(s): a graph around one single-input node named ``nd``."""
    g = Graph("t")
    out = op(g, g.source("x", width, max_rows=max_rows, dtype=dtype))  # type: ignore[arg-type]
    for v in out if isinstance(out, tuple) else (out,):
        g.sink(v)
    return g


def joined(op: str, *widths: int, max_rows: int = 4) -> Graph:
    g = Graph("t")
    srcs = [g.source(f"x{i}", w, max_rows=max_rows) for i, w in enumerate(widths)]
    g.sink(getattr(g, op)(*srcs, name=NODE))
    return g


def aggregate_graph() -> Graph:
    g = Graph("t")
    x = g.source("x", 1, max_rows=4)
    e = g.source("e", 2, max_rows=8, dtype="index")
    g.sink(g.aggregate(x, e, name=NODE))
    return g


def loss_graph(fn: str, width: int = 2) -> Graph:
    g = Graph("t")
    p = g.source("p", width, max_rows=2)
    if fn == "mse":
        t = g.source("target", width, max_rows=2)
    else:
        t = g.source("target", 1, max_rows=2, dtype="index")
    g.loss(p, t, fn, name=NODE)
    return g


def only(emits: list[tuple[int, Message]]) -> tuple[int, Message]:
    assert len(emits) == 1
    return emits[0]


# --- exact fixed-point integers --------------------------------------------------------------


def test_source_quantizes_half_up_and_counts_saturation() -> None:
    g = unary(lambda g, x: x)
    k = kernel(g, name="x")
    x = [[0.5, 100.0, 2**-11], [-(2**-11), -3 * 2**-11, -100.0]]  # halves of an LSB round up
    port, m = only(k.forward(0, [fwd(T, x)]))  # type: ignore[arg-type]
    assert port == 0 and m.direction == Direction.FWD
    np.testing.assert_array_equal(m.payload, i64([[512, 32767, 1], [0, -1, -32768]]))
    assert k.counter.as_dict() == {"x.in": 2}


def test_source_index_payloads_are_unscaled_integers() -> None:
    k = kernel(unary(lambda g, x: x, width=2, dtype="index"), name="x")
    _, m = only(k.forward(0, [fwd(T, np.array([[3.0, 0.0]]))]))
    assert m.payload.dtype == np.int64
    np.testing.assert_array_equal(m.payload, i64([[3, 0]]))
    for bad in ([[1.5, 0.0]], [[-1, 2]], [[np.nan, 1.0]]):
        with pytest.raises(KernelError, match="index payload"):
            k.forward(0, [fwd(Tag(2), np.array(bad))], train=False)


def test_source_backward_completes_and_catches_strays() -> None:
    k = kernel(unary(lambda g, x: x), name="x")
    assert isinstance(k, SourceKernel)
    k.forward(0, [fwd(Tag(1), [[0.0, 0.0, 0.0]]), fwd(Tag(2), [[1.0, 1.0, 1.0]])])  # type: ignore[list-item]
    assert k.pending() == 2
    assert k.backward(0, [bwd(Tag(2), i64([[0, 0, 0]]))]) == []
    assert (k.pending(), k.completed) == (1, 1)
    with pytest.raises(KernelError, match="no forward entry"):
        k.backward(0, [bwd(Tag(9), i64([[0, 0, 0]]))])


def test_sink_records_and_answers_with_zero_gradients() -> None:
    k = kernel(unary(lambda g, x: g.tanh(x)), F32, name="sink0")
    assert isinstance(k, SinkKernel)
    y = np.ones((2, 3), np.float32)
    port, m = only(k.forward(0, [fwd(T, y)]))
    assert port == 0 and m.direction == Direction.BWD and m.tag == T
    np.testing.assert_array_equal(m.payload, np.zeros((2, 3), np.float32))
    assert k.forward(0, [fwd(Tag(2), y)], train=False) == []
    assert [t for t, _ in k.outputs] == [T, Tag(2)]


def test_mul_rounds_half_up_and_saturates() -> None:
    k = kernel(joined("mul", 3, 3))
    assert k.forward(0, [fwd(T, i64([[3, -3, 32767]]))]) == []
    _, y = only(k.forward(1, [fwd(T, i64([[512, 512, 2048]]))]))
    # 3 * 0.5 LSB = 1.5 -> 2; -1.5 -> -1 (half up, not away from zero); 32 * 2 saturates
    np.testing.assert_array_equal(y.payload, i64([[2, -1, 32767]]))
    assert k.counter.as_dict() == {"nd.fwd": 1}
    (p0, dx0), (p1, dx1) = k.backward(0, [bwd(T, i64([[4096, 4096, 1]]))])
    assert (p0, p1) == (0, 1)
    np.testing.assert_array_equal(dx0.payload, i64([[2048, 2048, 2]]))  # dy * x1: 1 * 2.0 -> 2 LSB
    np.testing.assert_array_equal(dx1.payload, i64([[12, -12, 32]]))  # 32767 / 1024 -> 32
    assert k.pending() == 0


def test_mul_narrows_partial_products_in_input_order() -> None:
    k = kernel(joined("mul", 1, 1, 1, 1))
    xs = [1, 1536, 1536, 1024]  # 1 LSB, 1.5, 1.5, 1.0
    out = [e for i, x in enumerate(xs) for e in k.forward(i, [fwd(T, i64([[x]]))])]
    _, y = only(out)
    np.testing.assert_array_equal(y.payload, i64([[3]]))  # 1 * 1.5 -> 2, 2 * 1.5 -> 3, * 1.0
    grads = k.backward(0, [bwd(T, i64([[1024]]))])
    # dx3 = dy * (x0 x1 x2) = 0.25 * 3 LSB; the reverse order would give 1.5 * 1.5 * 1 -> 2
    np.testing.assert_array_equal(grads[3][1].payload, i64([[3]]))
    np.testing.assert_array_equal(grads[0][1].payload, i64([[2304]]))  # 0.25 * 2.25 at Q.10


def test_sums_saturate_to_the_precision_of_their_direction() -> None:
    """Forward sums clamp to data, gradient sums to grads (here of different widths)."""
    narrow_data = NumericConfig("fixed", data=Precision(12, 8), grads=Precision(20, 12))
    add = kernel(joined("add", 1, 1), narrow_data)
    add.forward(0, [fwd(T, i64([[2000]]))])
    _, y = only(add.forward(1, [fwd(T, i64([[100]]))]))
    assert y.payload[0, 0] == 2047
    bcast = kernel(unary(lambda g, x: g.broadcast(x, 2, name=NODE), width=1), narrow_data)
    bcast.forward(0, [fwd(T, i64([[1]]))])
    bcast.backward(0, [bwd(T, i64([[2000]]))])
    _, dx = only(bcast.backward(1, [bwd(T, i64([[100]]))]))
    assert dx.payload[0, 0] == 2100
    agg = kernel(aggregate_graph(), narrow_data)
    agg.forward(1, [fwd(T, i64([[0, 1], [1, 1]]))])
    _, y = only(agg.forward(0, [fwd(T, i64([[2000], [100]]))]))
    np.testing.assert_array_equal(y.payload, i64([[0], [2047]]))
    (_, dx), _ = agg.backward(0, [bwd(T, i64([[0], [300000]]))])
    np.testing.assert_array_equal(dx.payload, i64([[300000], [300000]]))
    rowsum = kernel(unary(lambda g, x: g.rowsum(x, name=NODE), width=1), narrow_data)
    _, y = only(rowsum.forward(0, [fwd(T, i64([[2000], [100]]))]))
    assert y.payload[0, 0] == 2047
    sigmoid = kernel(unary(lambda g, x: g.sigmoid(x, name=NODE), width=1), narrow_data)
    sigmoid.forward(0, [fwd(T, i64([[0]]))])  # y = 128 (0.5), slope 64 (0.25)
    _, dx = only(sigmoid.backward(0, [bwd(T, i64([[400000]]))]))
    assert dx.payload[0, 0] == 100000
    assert add.counter.as_dict() == {"nd.fwd": 1}


def test_add_sums_exactly_then_saturates_once() -> None:
    k = kernel(joined("add", 3, 3, 3))
    k.forward(0, [fwd(T, i64([[30000, -30000, 5]]))])
    k.forward(2, [fwd(T, i64([[-10000, 0, 0]]))])
    _, y = only(k.forward(1, [fwd(T, i64([[10000, -10000, 6]]))]))
    # saturating after each step would give 22767 in column 0
    np.testing.assert_array_equal(y.payload, i64([[30000, -32768, 11]]))
    assert k.counter.as_dict() == {"nd.fwd": 1}
    emits = k.backward(0, [bwd(T, i64([[1, 2, 3]]))])
    assert [p for p, _ in emits] == [0, 1, 2]
    for _, m in emits:
        np.testing.assert_array_equal(m.payload, i64([[1, 2, 3]]))


def test_lookup_tables_give_the_tabulated_integers() -> None:
    tanh = kernel(unary(lambda g, x: g.tanh(x, name=NODE), width=4))
    _, y = only(tanh.forward(0, [fwd(T, i64([[0, 1024, 20000, -20000]]))]))
    # bin of 0 is [0, 16): tanh(7.5 / 1024) * 1024 = 7.4999 -> 7; inputs beyond +-8 clamp
    np.testing.assert_array_equal(y.payload, i64([[7, 783, 1024, -1024]]))
    sigmoid = kernel(unary(lambda g, x: g.sigmoid(x, name=NODE), width=1))
    _, y = only(sigmoid.forward(0, [fwd(T, i64([[0]]))]))
    np.testing.assert_array_equal(y.payload, i64([[514]]))  # 1024 * sigmoid(7.5/1024) = 513.87


def test_tanh_backward_integers() -> None:
    k = kernel(unary(lambda g, x: g.tanh(x, name=NODE), width=1))
    k.forward(0, [fwd(T, i64([[1024]]))])  # y = 783
    _, dx = only(k.backward(0, [bwd(T, i64([[4096]]))]))
    # s = 1024 - round(783^2 / 1024) = 1024 - 599 = 425; dx = 4096 * 425 / 1024 = 1700
    np.testing.assert_array_equal(dx.payload, i64([[1700]]))


def test_sigmoid_backward_rounds_half_up() -> None:
    k = kernel(unary(lambda g, x: g.sigmoid(x, name=NODE), width=5))
    k.forward(0, [fwd(T, i64([[0, 0, 0, 0, 0]]))])  # y = 514 everywhere
    _, dx = only(k.backward(0, [bwd(T, i64([[4096, 3, -2, 2, -3]]))]))
    # s = round(514 * 510 / 1024) = round(256.0 - 0.0004...) = 256; dx = dy / 4 rounded half up
    np.testing.assert_array_equal(dx.payload, i64([[1024, 1, 0, 1, -1]]))


def test_relu_fixed_passes_gradient_where_input_was_positive() -> None:
    k = kernel(unary(lambda g, x: g.relu(x, name=NODE)))
    _, y = only(k.forward(0, [fwd(T, i64([[-5, 0, 7]]))]))
    np.testing.assert_array_equal(y.payload, i64([[0, 0, 7]]))
    _, dx = only(k.backward(0, [bwd(T, i64([[1, 2, 3]]))]))
    np.testing.assert_array_equal(dx.payload, i64([[0, 0, 3]]))


def test_linear_fixed_integers() -> None:
    k = kernel(unary(lambda g, x: g.linear(x, 1, name=NODE), width=2))
    assert isinstance(k, LinearKernel)
    k.set_params({"weight": np.array([[0.5, 0.25]]), "bias": np.array([0.125])})
    _, y = only(k.forward(0, [fwd(T, i64([[3, 1]]))]))
    # (3 * 2048 + 1 * 1024 + 512 << 10) / 4096 = 129.75 -> 130
    np.testing.assert_array_equal(y.payload, i64([[130]]))
    _, dx = only(k.backward(0, [bwd(T, i64([[3]]))]))
    np.testing.assert_array_equal(dx.payload, i64([[2, 1]]))  # 1.5 -> 2, 0.75 -> 1
    np.testing.assert_array_equal(k.grads["weight"], i64([[9, 3]]))  # frac 12 + 10
    np.testing.assert_array_equal(k.grads["bias"], np.array([3 << 10]))


def test_broadcast_gradient_sum_saturates_to_grads() -> None:
    k = kernel(unary(lambda g, x: g.broadcast(x, 2, name=NODE), width=2))
    outs = k.forward(0, [fwd(T, i64([[1, 2]]))])
    assert [p for p, _ in outs] == [0, 1]
    assert k.backward(1, [bwd(T, i64([[30000, -5]]))]) == []
    assert k.pending() == 1
    _, dx = only(k.backward(0, [bwd(T, i64([[10000, 7]]))]))
    np.testing.assert_array_equal(dx.payload, i64([[32767, 2]]))
    assert k.counter.as_dict() == {"nd.bwd": 1}


def test_broadcast_of_index_rows_returns_zero_gradient() -> None:
    k = kernel(unary(lambda g, x: g.broadcast(x, 2, name=NODE), width=2, dtype="index"), F32)
    k.forward(0, [fwd(T, i64([[1, 2]]))])
    k.backward(0, [bwd(T, np.zeros((1, 2), np.float32))])
    _, dx = only(k.backward(1, [bwd(T, np.zeros((1, 2), np.float32))]))
    assert dx.payload.dtype == np.float32 and not dx.payload.any()


def test_aggregate_fixed_sums_exactly_and_saturates() -> None:
    k = kernel(aggregate_graph())
    edges = i64([[0, 2], [1, 2], [2, 2], [2, 0], [0, 1], [1, 1]])
    k.forward(1, [fwd(T, edges)])
    _, y = only(k.forward(0, [fwd(T, i64([[30000], [10000], [-20000]]))]))
    # node 2: 30000 + 10000 - 20000 exactly (no clamp at 32767 on the way); node 1 saturates
    np.testing.assert_array_equal(y.payload, i64([[-20000], [32767], [20000]]))
    assert k.counter.as_dict() == {"nd.fwd": 1}
    (p0, dx), (p1, de) = k.backward(0, [bwd(T, i64([[1], [20], [300]]))])
    assert (p0, p1) == (0, 1)
    np.testing.assert_array_equal(dx.payload, i64([[320], [320], [301]]))  # dx[src] += dy[dst]
    np.testing.assert_array_equal(de.payload, np.zeros((6, 2), np.int64))


def test_rowsum_saturates_once_and_repeats_the_gradient() -> None:
    k = kernel(unary(lambda g, x: g.rowsum(x, name=NODE), width=2))
    _, y = only(k.forward(0, [fwd(T, i64([[30000, 1], [10000, 2], [-10000, 3]]))]))
    np.testing.assert_array_equal(y.payload, i64([[30000, 6]]))
    _, dx = only(k.backward(0, [bwd(T, i64([[4, -5]]))]))
    np.testing.assert_array_equal(dx.payload, i64([[4, -5]] * 3))


def test_mse_loss_fixed() -> None:
    k = kernel(loss_graph("mse"))
    assert k.forward(1, [fwd(T, i64([[256, 0]]))]) == []
    (p0, dy), (p1, dt) = k.forward(0, [fwd(T, i64([[1024, 0]]))])
    assert (p0, p1) == (0, 1) and dy.direction == Direction.BWD
    np.testing.assert_array_equal(dy.payload, i64([[3072, 0]]))  # 0.75 at 12 fraction bits
    np.testing.assert_array_equal(dt.payload, i64([[0, 0]]))
    (rec,) = k.results  # type: ignore[has-type]
    assert isinstance(rec, LossRecord)
    assert rec.tag == T and rec.loss == 0.5 * 0.75**2 and rec.correct is None
    np.testing.assert_array_equal(rec.prediction, [[1.0, 0.0]])
    np.testing.assert_array_equal(rec.target, [[0.25, 0.0]])


def test_softmax_ce_float_records_and_emits_softmax_minus_onehot() -> None:
    k = kernel(loss_graph("softmax_ce"), F32)
    assert isinstance(k, LossKernel)
    p = np.array([[2.0, 0.0], [0.0, 1.0]], np.float32)
    k.forward(1, [fwd(T, i64([[0], [1]]))])
    (_, dy), _ = k.forward(0, [fwd(T, p)])
    s0, s1 = 1 / (1 + np.exp(-2.0)), 1 / (1 + np.exp(-1.0))
    assert dy.payload.dtype == np.float32
    np.testing.assert_allclose(dy.payload, [[s0 - 1, 1 - s0], [1 - s1, s1 - 1]], rtol=1e-6)
    (rec,) = k.results
    assert rec.correct is True
    assert rec.loss == pytest.approx(-np.log(s0) - np.log(s1))
    k.forward(1, [fwd(Tag(2), i64([[1], [1]]))])
    k.forward(0, [fwd(Tag(2), p)], train=False)
    assert k.results[-1].correct is False and k.pending() == 0


def test_loss_inference_records_but_emits_nothing() -> None:
    k = kernel(loss_graph("softmax_ce"))
    k.forward(1, [fwd(T, i64([[1]]))], train=False)
    assert k.forward(0, [fwd(T, i64([[0, 999]]))], train=False) == []
    assert len(k.results) == 1 and k.results[0].correct is True


# --- control flow ----------------------------------------------------------------------------


def test_cond_routes_by_predicate_and_passes_gradients_up() -> None:
    k = kernel(unary(lambda g, x: g.cond(x, S[0] < S[1], name=NODE)), F32)
    x = np.ones((1, 3), np.float32)
    routes = [p for state in [(0, 1), (2, 9), (3, 3), (7, 1)] for p, _ in k.forward(0, [fwd(Tag(1, state), x)])]
    assert routes == [0, 0, 1, 1]
    dy = bwd(Tag(1, (3, 3)), np.full((1, 3), 2.0, np.float32))
    assert k.backward(1, [dy]) == [(0, dy)]
    with pytest.raises(KernelError, match=r"tag 5\[1\]"):
        k.forward(0, [fwd(Tag(5, (1,)), x)])


def test_phi_sends_each_gradient_back_by_the_port_it_came_in() -> None:
    g = Graph("t")
    g.sink(g.phi(g.source("a", 2), g.source("b", 2), name=NODE))
    k = kernel(g, F32)
    x = np.zeros((1, 2), np.float32)
    assert [p for p, _ in k.forward(1, [fwd(Tag(1), x)]) + k.forward(0, [fwd(Tag(2), x)])] == [0, 0]
    back = k.backward(0, [bwd(Tag(2), x), bwd(Tag(1), x)])
    assert [(p, m.tag) for p, m in back] == [(0, Tag(2)), (1, Tag(1))]
    assert k.pending() == 0
    k.forward(0, [fwd(Tag(3), x)], train=False)
    assert k.pending() == 0


@pytest.mark.parametrize(
    "ops, before, after",
    [
        ((inc(0),), (4,), (5,)),
        ((inc(1, 3), push(9)), (1, 2), (1, 5, 9)),
        ((push(9), pop(9)), (1,), (1,)),
        ((parent(0),), (5,), (2, 0)),
        ((parent(0),), (6,), (2, 1)),
        ((parent(1), inc(0)), (0, 1), (1, 0, 0)),
    ],
)
def test_isu_forward_and_backward_round_trip_the_state(ops, before, after) -> None:  # type: ignore[no-untyped-def]
    k = kernel(unary(lambda g, x: g.isu(x, *ops, name=NODE)), F32)
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    _, y = only(k.forward(0, [fwd(Tag(8, before), x)]))
    assert y.tag == Tag(8, after) and y.payload is x
    _, dx = only(k.backward(0, [bwd(Tag(8, after), x)]))
    assert dx.tag == Tag(8, before) and dx.direction == Direction.BWD


@pytest.mark.parametrize(
    "ops, state",
    [((pop(3),), (1, 2)), ((parent(0),), (0,)), ((inc(2),), (1,)), ((push(1),), (1, 2, 3, 4))],
)
def test_isu_rejects_impossible_updates(ops, state) -> None:  # type: ignore[no-untyped-def]
    k = kernel(unary(lambda g, x: g.isu(x, *ops, name=NODE)), F32)
    with pytest.raises(KernelError, match=f"node '{NODE}'.*tag"):
        k.forward(0, [fwd(Tag(1, state), np.zeros((1, 3), np.float32))])


def test_ungroup_then_group_restores_the_message() -> None:
    g = Graph("t")
    g.sink(g.group(g.ungroup(g.source("x", 2, max_rows=3), name="ug"), 3, name="gr"))
    g.validate()
    ug, gr = (make_kernel(g.node(n), g, FIXED) for n in ("ug", "gr"))
    tag, x = Tag(4, (1,)), i64([[1, 2], [3, 4], [5, 6]])
    rows = ug.forward(0, [fwd(tag, x)])
    assert [m.tag for _, m in rows] == [Tag(4, (1, i, 3)) for i in range(3)]
    out = [e for _, m in reversed(rows) for e in gr.forward(0, [m])]  # arrival order must not matter
    _, y = only(out)
    assert y.tag == tag
    np.testing.assert_array_equal(y.payload, x)
    dy = i64([[7, 8], [9, 10], [11, 12]])
    row_grads = gr.backward(0, [bwd(tag, dy)])
    assert [m.tag for _, m in row_grads] == [m.tag for _, m in rows]
    back = [e for _, m in reversed(row_grads) for e in ug.backward(0, [m])]
    _, dx = only(back)
    assert dx.tag == tag
    np.testing.assert_array_equal(dx.payload, dy)
    assert ug.pending() == gr.pending() == 0


# --- errors ----------------------------------------------------------------------------------


def test_duplicate_tag_in_flight_is_an_error() -> None:
    k = kernel(unary(lambda g, x: g.tanh(x, name=NODE)), F32)
    x = np.zeros((1, 3), np.float32)
    k.forward(0, [fwd(T, x)])
    with pytest.raises(KernelError, match="already in flight"):
        k.forward(0, [fwd(T, x)])
    k.forward(0, [fwd(T, x)], train=False)  # inference caches nothing, so no clash


CACHING = {
    "linear": lambda: unary(lambda g, x: g.linear(x, 2, name=NODE)),
    "relu": lambda: unary(lambda g, x: g.relu(x, name=NODE)),
    "mul": lambda: joined("mul", 3, 3),
    "phi": lambda: unary(lambda g, x: g.phi(x, g.source("y", 3), name=NODE)),
    "rowsum": lambda: unary(lambda g, x: g.rowsum(x, name=NODE)),
    "aggregate": aggregate_graph,
    "group": lambda: unary(lambda g, x: g.group(x, 4, name=NODE), max_rows=1),
    "ungroup": lambda: unary(lambda g, x: g.ungroup(x, name=NODE)),
}


@pytest.mark.parametrize("name", CACHING)
def test_backward_for_an_unknown_tag_is_an_error(name: str) -> None:
    k = kernel(CACHING[name]())
    spec = k.out_specs[0]
    tag = Tag(3, (0, 1)) if name == "ungroup" else T
    with pytest.raises(KernelError, match=f"node '{NODE}'"):
        k.backward(0, [bwd(tag, np.zeros((1, spec.width), np.int64))])


@pytest.mark.parametrize(
    "payload",
    [np.zeros((1, 4)), np.zeros((5, 3)), np.zeros((0, 3)), np.zeros(3)],
    ids=["width", "too_many_rows", "no_rows", "one_dim"],
)
def test_payload_that_breaks_the_edge_spec_is_an_error(payload: np.ndarray) -> None:
    k = kernel(unary(lambda g, x: g.linear(x, 2, name=NODE)), F32)
    with pytest.raises(KernelError, match=f"node '{NODE}': in0: payload"):
        k.forward(0, [fwd(T, payload)])


def test_messages_on_ports_the_node_lacks_are_errors() -> None:
    k = kernel(joined("add", 3, 3), F32)
    with pytest.raises(KernelError, match="no input port in2"):
        k.forward(2, [fwd(T, np.zeros((1, 3)))])
    with pytest.raises(KernelError, match="no output port out1"):
        k.backward(1, [bwd(T, np.zeros((1, 3)))])


def test_gradient_of_the_wrong_shape_is_an_error() -> None:
    k = kernel(unary(lambda g, x: g.tanh(x, name=NODE)), F32)
    k.forward(0, [fwd(T, np.zeros((2, 3), np.float32))])
    with pytest.raises(KernelError, match="gradient of shape"):
        k.backward(0, [bwd(T, np.zeros((1, 3), np.float32))])


@pytest.mark.parametrize("op", ["add", "concat", "mul"])
def test_joined_messages_must_agree_in_rows(op: str) -> None:
    k = kernel(joined(op, 2, 2), F32)
    k.forward(0, [fwd(T, np.zeros((1, 2)))])
    with pytest.raises(KernelError, match="differ in rows"):
        k.forward(1, [fwd(T, np.zeros((2, 2)))])


def test_second_message_for_a_join_slot_is_an_error() -> None:
    k = kernel(joined("add", 2, 2), F32)
    k.forward(0, [fwd(T, np.zeros((1, 2)))])
    with pytest.raises(KernelError, match="second message"):
        k.forward(0, [fwd(T, np.zeros((1, 2)))])


def test_aggregate_rejects_edges_outside_the_node_range() -> None:
    k = kernel(aggregate_graph())
    k.forward(1, [fwd(T, i64([[0, 1], [3, 0]]))])
    with pytest.raises(KernelError, match=r"outside \[0, 3\)"):
        k.forward(0, [fwd(T, i64([[1], [2], [3]]))])


def test_softmax_ce_rejects_a_class_outside_the_width() -> None:
    k = kernel(loss_graph("softmax_ce"))
    k.forward(1, [fwd(T, i64([[2]]))])
    with pytest.raises(KernelError, match=r"outside \[0, 2\)"):
        k.forward(0, [fwd(T, i64([[0, 0]]))])


@pytest.mark.parametrize(
    "tags, match",
    [
        ([Tag(1, (0, 5))], "beyond 4"),
        ([Tag(1, (0, 2)), Tag(1, (0, 2))], "second message for row 0"),
        ([Tag(1, (0, 2)), Tag(1, (1, 3))], "says 3 rows, earlier ones 2"),
        ([Tag(1, (2, 2))], r"outside \[0, 2\)"),
        ([Tag(1, (0,))], "does not end in a row index"),
    ],
)
def test_group_rejects_malformed_row_tags(tags: list[Tag], match: str) -> None:
    k = kernel(unary(lambda g, x: g.group(x, 4, name=NODE), max_rows=1))
    with pytest.raises(KernelError, match=match):
        for tag in tags:
            k.forward(0, [fwd(tag, i64([[1, 2, 3]]))])


def test_ungroup_needs_two_free_state_words() -> None:
    k = kernel(unary(lambda g, x: g.ungroup(x, name=NODE)))
    with pytest.raises(KernelError, match="no room"):
        k.forward(0, [fwd(Tag(1, (1, 2, 3)), i64([[1, 2, 3]]))])


def test_make_kernel_rejects_an_unknown_kind_and_seeds_parameters() -> None:
    g = unary(lambda g, x: g.linear(x, 2, name=NODE))
    g.validate()
    node = g.node(NODE)
    a = make_kernel(node, g, F32, rng=np.random.default_rng(5))
    b = make_kernel(node, g, F32, rng=np.random.default_rng(5))
    assert isinstance(a, LinearKernel) and isinstance(b, LinearKernel)
    np.testing.assert_array_equal(a.params["weight"], b.params["weight"])
    counter = SaturationCounter()
    assert make_kernel(g.node("x"), g, FIXED, counter=counter).counter is counter
    node.kind = "bogus"  # type: ignore[misc]
    with pytest.raises(KernelError, match="no kernel for node kind 'bogus'"):
        make_kernel(node, g, F32)


@pytest.mark.parametrize("fn", ["relu", "tanh", "sigmoid"])
def test_float32_activations_keep_float32(fn: str) -> None:
    k = kernel(unary(lambda g, x: g.activation(x, fn, name=NODE)), F32)
    assert isinstance(k, ActivationKernel)
    x = np.array([[-800.0, 0.5, 800.0]], np.float32)  # no overflow from exp
    with np.errstate(over="raise", invalid="raise"):
        _, y = only(k.forward(0, [fwd(T, x)]))
        _, dx = only(k.backward(0, [bwd(T, np.ones((1, 3), np.float32))]))
    assert y.payload.dtype == dx.payload.dtype == np.float32
