"""The numeric model (amp_hls.numerics) against exact integer and rational arithmetic."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from amp_hls.errors import NumericsError
from amp_hls.ir import LIMITS
from amp_hls.numerics import (
    ACC_BITS,
    ACC_MAX,
    ACC_MIN,
    FLOAT32,
    FLOAT64,
    LUT_INDEX_BITS,
    LUT_KINDS,
    NumericConfig,
    Precision,
    SaturationCounter,
    activation_table,
    dequantize,
    lut_error_bound,
    max_fan_in,
    narrow,
    quantize,
    requantize,
    round_shift,
    saturate,
    saturate_acc,
)

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ACC_VALUES = st.integers(-(1 << 62), (1 << 62) - 1)  # headroom for the rounding bias


@st.composite
def precisions(draw: st.DrawFn, max_width: int = 32) -> Precision:
    width = draw(st.integers(2, max_width))
    return Precision(width, draw(st.integers(0, width - 1)))


def exact_round_shift(v: int, shift: int) -> int:
    return math.floor(Fraction(v, 1 << shift) + Fraction(1, 2)) if shift > 0 else v << -shift


def clamp(v: int, p: Precision) -> int:
    return min(max(v, p.qmin), p.qmax)


# --- the rounding and narrowing rules -------------------------------------------------------------


@PROPS
@given(values=st.lists(ACC_VALUES, min_size=1, max_size=20), shift=st.integers(1, 62))
@example(values=[1, 2, 3, -1, -2, -3, 5, -5], shift=1)
def test_round_shift_is_floor_of_value_plus_half(values, shift):
    out = round_shift(np.array(values, dtype=np.int64), shift)
    assert out.dtype == np.int64
    assert out.tolist() == [exact_round_shift(v, shift) for v in values]


def test_round_shift_rounds_half_up():
    assert round_shift(np.array([1, 3, -1, -3, 2, -2]), 1).tolist() == [1, 2, 0, -1, 1, -1]


@PROPS
@given(values=st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=20),
       shift=st.integers(-20, 0))
def test_round_shift_non_positive_multiplies_exactly(values, shift):
    assert round_shift(np.array(values), shift).tolist() == [v << -shift for v in values]


def test_round_shift_accepts_a_scalar():
    assert int(round_shift(5, 1)) == 3


@PROPS
@given(values=st.lists(ACC_VALUES, min_size=1, max_size=30), p=precisions())
def test_saturate_clamps_and_counts_exactly(values, p):
    counter = SaturationCounter()
    counter.add("other", 2)
    out = saturate(np.array(values, dtype=np.int64), p, counter, "fc1.fwd")
    assert out.tolist() == [clamp(v, p) for v in values]
    clamped = sum(not p.qmin <= v <= p.qmax for v in values)
    assert counter.counts["fc1.fwd"] == clamped
    assert counter.total == clamped + 2
    assert ("fc1.fwd" in counter.as_dict()) == (clamped > 0)


@PROPS
@given(values=st.lists(st.integers(-(1 << 62), (1 << 62) - 1), min_size=1, max_size=30))
def test_saturate_acc(values):
    counter = SaturationCounter()
    out = saturate_acc(np.array(values, dtype=np.int64), counter, "acc")
    assert out.tolist() == [min(max(v, ACC_MIN), ACC_MAX) for v in values]
    assert counter.total == sum(not ACC_MIN <= v <= ACC_MAX for v in values)
    assert (ACC_MIN, ACC_MAX) == (-(1 << (ACC_BITS - 1)), (1 << (ACC_BITS - 1)) - 1)


@PROPS
@given(values=st.lists(ACC_VALUES, min_size=1, max_size=20), shift=st.integers(-8, 40),
       p=precisions())
def test_narrow_is_saturate_of_round_shift(values, shift, p):
    values = [v >> 9 for v in values]  # leave room for a left shift
    a, b = SaturationCounter(), SaturationCounter()
    got = narrow(np.array(values), shift, p, a, "s")
    want = saturate(round_shift(np.array(values), shift), p, b, "s")
    assert got.tolist() == want.tolist() == [clamp(exact_round_shift(v, shift), p) for v in values]
    assert a.counts == b.counts


@PROPS
@given(src=precisions(), dst=precisions(), data=st.data())
def test_requantize_matches_exact_rescaling(src, dst, data):
    values = data.draw(st.lists(st.integers(src.qmin, src.qmax), min_size=1, max_size=20))
    counter = SaturationCounter()
    out = requantize(np.array(values), src, dst, counter, "rq")
    scale = Fraction(1 << dst.frac, 1 << src.frac)
    unclamped = [math.floor(v * scale + Fraction(1, 2)) for v in values]
    assert out.tolist() == [clamp(v, dst) for v in unclamped]
    assert counter.total == sum(not dst.qmin <= v <= dst.qmax for v in unclamped)


# --- quantize / dequantize ------------------------------------------------------------------------


@PROPS
@given(x=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20),
       p=precisions())
@example(x=[0.49999999999999994, -0.5000000000000001, 2.5, -2.5], p=Precision(16, 0))
@example(x=[1e308, -1e308, 5e-324], p=Precision(32, 31))
def test_quantize_is_floor_of_scaled_plus_half_saturated(x, p):
    counter = SaturationCounter()
    out = quantize(np.array(x), p, counter, "in")
    assert out.dtype == np.int64
    unclamped = [math.floor(Fraction(v) * p.one + Fraction(1, 2)) for v in x]
    assert out.tolist() == [clamp(v, p) for v in unclamped]
    assert counter.total == sum(not p.qmin <= v <= p.qmax for v in unclamped)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [0.0, math.nan], [[1.0], [-math.inf]]])
def test_quantize_rejects_non_finite(bad):
    with pytest.raises(NumericsError, match="non-finite"):
        quantize(bad, Precision(16, 8))


@PROPS
@given(p=precisions(), data=st.data())
def test_dequantize_of_quantize_within_half_an_lsb(p, data):
    lo, hi = p.qmin * p.lsb, p.qmax * p.lsb
    x = data.draw(st.lists(st.floats(lo, hi), min_size=1, max_size=20))
    back = dequantize(quantize(np.array(x), p), p)
    assert np.all(np.abs(back - np.array(x)) <= p.lsb / 2)


@PROPS
@given(p=precisions(), data=st.data())
def test_quantize_of_dequantize_is_identity(p, data):
    q = data.draw(st.lists(st.integers(p.qmin, p.qmax), min_size=1, max_size=20))
    assert quantize(dequantize(np.array(q), p), p).tolist() == q


# --- precisions and configurations ----------------------------------------------------------------


@pytest.mark.parametrize(
    "width, frac",
    [(1, 0), (33, 0), (0, 0), (16, -1), (16, 16), (16, 20), (16.0, 4), ("16", 4), (16, None),
     (True, 0), (16, True)],
)
def test_precision_rejects(width, frac):
    with pytest.raises(NumericsError):
        Precision(width, frac)


def test_precision_properties():
    p = Precision(16, 10)
    assert (p.qmin, p.qmax, p.one, p.lsb, str(p)) == (-32768, 32767, 1024, 2.0**-10, "Q16.10")
    assert Precision(8, 7).one > Precision(8, 7).qmax  # 1.0 itself is not representable


@PROPS
@given(p=precisions())
def test_precision_json_round_trip(p):
    assert Precision.from_json(json.loads(json.dumps(p.to_json()))) == p


@pytest.mark.parametrize(
    "doc",
    [{"width": 16}, {"frac": 3}, {"width": 16.7, "frac": 3}, {"width": "16", "frac": 3},
     {"width": 16, "frac": True}, [16, 3], "Q16.3", None],
)
def test_precision_from_malformed_json(doc):
    with pytest.raises(NumericsError):
        Precision.from_json(doc)


@PROPS
@given(mode=st.sampled_from(["float", "fixed"]), data=precisions(), weights=precisions(),
       grads=precisions(), dtype=st.sampled_from(["float32", "float64"]))
def test_numeric_config_json_round_trip(mode, data, weights, grads, dtype):
    config = NumericConfig(mode, data, weights, grads, dtype)
    assert NumericConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    assert config.grad_acc_frac == grads.frac + data.frac


def test_numeric_config_dtypes():
    assert FLOAT32.dtype == np.float32 and FLOAT64.dtype == np.float64
    assert NumericConfig("fixed").dtype == np.int64 and NumericConfig("fixed").fixed
    assert not FLOAT32.fixed


@pytest.mark.parametrize(
    "kwargs", [{"mode": "double"}, {"mode": None}, {"float_dtype": "float16"}],
)
def test_numeric_config_rejects(kwargs):
    with pytest.raises(NumericsError):
        NumericConfig(**kwargs)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("mode"),
        lambda d: d.pop("grads"),
        lambda d: d.update(mode="int"),
        lambda d: d.update(data={"width": 40, "frac": 3}),
        lambda d: d.update(weights="Q16.12"),
        lambda d: d.update(float_dtype="bfloat16"),
    ],
)
def test_numeric_config_from_malformed_json(edit):
    doc = NumericConfig("fixed").to_json()
    edit(doc)
    with pytest.raises(NumericsError):
        NumericConfig.from_json(doc)


def test_numeric_config_float_dtype_defaults():
    doc = NumericConfig("fixed").to_json()
    del doc["float_dtype"]
    assert NumericConfig.from_json(doc).float_dtype == "float32"


# --- accumulator bound -------------------------------------------------------------------------------


@PROPS
@given(a=precisions(), b=precisions())
def test_max_fan_in_products_fit_the_accumulator(a, b):
    n = max_fan_in(a, b)
    largest = a.qmin * b.qmin  # the product of largest magnitude
    assert n * largest <= ACC_MAX
    assert (n + 1) * largest > ACC_MAX
    assert n * a.qmin * b.qmax >= ACC_MIN
    assert n * a.qmax * b.qmin >= ACC_MIN


def test_max_fan_in_worst_case_sum_is_exact_in_the_accumulator():
    a, b = Precision(16, 10), Precision(16, 12)
    n = max_fan_in(a, b)
    assert n >= LIMITS.max_width  # every Linear fan-in the IR allows fits
    worst = np.full(n, a.qmin, dtype=np.int64) * np.full(n, b.qmin, dtype=np.int64)
    total = int(worst.sum())
    assert total == n * a.qmin * b.qmin
    assert saturate_acc(total).item() == total


# --- lookup tables -------------------------------------------------------------------------------------

TABLE_PRECISIONS = [Precision(16, 10), Precision(16, 12), Precision(12, 8), Precision(8, 4),
                    Precision(16, 14), Precision(8, 7), Precision(24, 16)]
REAL = {"tanh": np.tanh, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}


def all_inputs(p: Precision) -> np.ndarray:
    return np.arange(p.qmin, p.qmax + 1, dtype=np.int64)


@pytest.mark.parametrize("p", TABLE_PRECISIONS, ids=str)
@pytest.mark.parametrize("kind", LUT_KINDS)
def test_table_is_monotonic_and_within_its_error_bound(kind, p):
    table = activation_table(kind, p)
    assert len(table.values) <= 1 << LUT_INDEX_BITS
    assert all(p.qmin <= v <= p.qmax for v in table.values)
    q = all_inputs(p) if p.width <= 16 else np.linspace(p.qmin, p.qmax, 200_001).astype(np.int64)
    out = table.lookup(q)
    assert np.all(np.diff(out) >= 0)
    error = np.abs(dequantize(out, p) - REAL[kind](dequantize(q, p)))
    assert error.max() <= lut_error_bound(table)


@pytest.mark.parametrize("p", [Precision(16, 10), Precision(12, 8)], ids=str)
def test_error_bound_is_not_loose(p):
    table = activation_table("tanh", p)
    q = all_inputs(p)
    error = np.abs(dequantize(table.lookup(q), p) - np.tanh(dequantize(q, p)))
    assert error.max() > lut_error_bound(table) / 4


@pytest.mark.parametrize("p", TABLE_PRECISIONS, ids=str)
def test_tanh_table_is_odd_to_within_a_bin(p):
    """``lookup(-q) == -lookup(q)`` within 1 LSB where the table has one entry per input.

    Binned tables put ``q`` and ``-q`` in bins whose midpoints differ by up to ``2**shift - 1``
    inputs (bins start at ``lo``, which ``-q`` mirrors to a bin end), so with slope at most 1 the
    outputs may differ by that many LSBs more.
    """
    table = activation_table("tanh", p)
    q = all_inputs(p)[1:] if p.width <= 16 else np.arange(-100_000, 100_001, dtype=np.int64)
    q = q[(q >= table.lo) & (-q <= table.hi)]
    mismatch = np.abs(table.lookup(-q) + table.lookup(q))
    assert mismatch.max() <= (1 << table.shift)
    if table.shift == 0:
        assert mismatch.max() <= 1


@pytest.mark.parametrize("kind", LUT_KINDS)
def test_table_saturates_outside_its_range(kind):
    p = Precision(16, 10)
    table = activation_table(kind, p)
    assert table.lookup(np.array([p.qmin])).item() == table.values[0]
    assert table.lookup(np.array([p.qmax])).item() == table.values[-1]
    assert table.lookup(np.array([table.hi + 1])).item() == table.values[-1]


def test_tables_are_cached():
    first = activation_table("sigmoid", Precision(12, 8))
    assert activation_table("sigmoid", Precision(12, 8)) is first
    assert activation_table("tanh", Precision(12, 8)) is not first


def test_unknown_table_kind():
    with pytest.raises(NumericsError, match="relu"):
        activation_table("relu", Precision(16, 10))
