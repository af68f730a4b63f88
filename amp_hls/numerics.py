"""The numeric model: float32 (or float64 for gradient checks) and bit-exact fixed point.

Every fixed-point rule of the project lives here and nowhere else; the C++ and SystemVerilog
headers are generated from these definitions (docs/contracts.md, Numerics).

Fixed point is signed two's complement: a value ``q`` of ``Precision(width, frac)`` means
``q / 2**frac``. Three tensor classes each have their own precision: ``data`` (forward
activations), ``weights`` and ``grads`` (backward payloads). Products are accumulated exactly in
int64 and clamped to a 48-bit accumulator (the DSP48 P register); validation bounds fan-in so a
48-bit register can never overflow mid-sum, which makes "exact, then clamp" equal to what the
hardware does.

One rounding rule: add half an LSB, then arithmetic shift right (round half up). One narrowing
rule: round, then saturate to the target precision, counting every saturated element.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .errors import NumericsError

ACC_BITS = 48
ACC_MIN = -(1 << (ACC_BITS - 1))
ACC_MAX = (1 << (ACC_BITS - 1)) - 1

Mode = Literal["float", "fixed"]


@dataclass(frozen=True)
class Precision:
    """Signed fixed-point format: ``width`` bits in all, ``frac`` of them after the point."""

    width: int
    frac: int

    def __post_init__(self) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.width, self.frac)):
            raise NumericsError(f"Precision fields must be int, got {self!r}")
        if not 2 <= self.width <= 32:
            raise NumericsError(f"Precision width must be in [2, 32], got {self.width}")
        if not 0 <= self.frac < self.width:
            raise NumericsError(f"Precision frac must be in [0, width), got {self.frac}")

    @property
    def qmin(self) -> int:
        return -(1 << (self.width - 1))

    @property
    def qmax(self) -> int:
        return (1 << (self.width - 1)) - 1

    @property
    def one(self) -> int:
        """The integer that represents 1.0 (it may not be representable: see qmax)."""
        return 1 << self.frac

    @property
    def lsb(self) -> float:
        return 2.0**-self.frac

    def __str__(self) -> str:
        return f"Q{self.width}.{self.frac}"

    def to_json(self) -> dict[str, int]:
        return {"width": self.width, "frac": self.frac}

    @classmethod
    def from_json(cls, doc: dict) -> Precision:
        try:
            return cls(doc["width"], doc["frac"])  # no int(): it would truncate 16.7 to 16
        except (KeyError, TypeError) as exc:
            raise NumericsError(f"malformed precision {doc!r}: {exc}") from None


class SaturationCounter:
    """Counts saturated elements per site (e.g. ``'fc1.fwd'``) so users see where range ran out."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, site: str, n: int) -> None:
        if n:
            self.counts[site] += n

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


@dataclass(frozen=True)
class NumericConfig:
    """How an executor computes: ``float`` (dtype float32/float64) or ``fixed``."""

    mode: Mode = "float"
    data: Precision = Precision(16, 10)
    weights: Precision = Precision(16, 12)
    grads: Precision = Precision(16, 12)
    float_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.mode not in ("float", "fixed"):
            raise NumericsError(f"numerics mode must be 'float' or 'fixed', got {self.mode!r}")
        for name in ("data", "weights", "grads"):
            if not isinstance(getattr(self, name), Precision):
                raise NumericsError(f"{name} must be a Precision, got {getattr(self, name)!r}")
        if self.float_dtype not in ("float32", "float64"):
            raise NumericsError(f"float_dtype must be float32 or float64, got {self.float_dtype!r}")

    @property
    def fixed(self) -> bool:
        return self.mode == "fixed"

    @property
    def dtype(self) -> np.dtype:
        """The payload dtype: int64 holding fixed-point integers, or the float dtype."""
        return np.dtype(np.int64) if self.fixed else np.dtype(self.float_dtype)

    @property
    def grad_acc_frac(self) -> int:
        """Fraction bits of a weight-gradient accumulator: grads x data products."""
        return self.grads.frac + self.data.frac

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "data": self.data.to_json(),
            "weights": self.weights.to_json(),
            "grads": self.grads.to_json(),
            "float_dtype": self.float_dtype,
        }

    @classmethod
    def from_json(cls, doc: dict) -> NumericConfig:
        try:
            return cls(
                mode=doc["mode"],
                data=Precision.from_json(doc["data"]),
                weights=Precision.from_json(doc["weights"]),
                grads=Precision.from_json(doc["grads"]),
                float_dtype=doc.get("float_dtype", "float32"),
            )
        except (KeyError, TypeError) as exc:
            raise NumericsError(f"malformed numeric config: {exc}") from None


FLOAT32 = NumericConfig("float")
FLOAT64 = NumericConfig("float", float_dtype="float64")


# --- the rules -----------------------------------------------------------------------------


def _as_int64(v: np.ndarray | int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def round_shift(v: np.ndarray | int, shift: int) -> np.ndarray:
    """Divide by ``2**shift`` with the project's one rounding rule: add half an LSB, shift.

    ``shift <= 0`` multiplies exactly. Arithmetic shift floors, so halves round towards +inf.
    """
    v = _as_int64(v)
    if shift > 0:
        return (v + (1 << (shift - 1))) >> shift
    if shift < 0:
        return v << -shift
    return v


def saturate(
    v: np.ndarray | int, p: Precision, counter: SaturationCounter | None = None, site: str = ""
) -> np.ndarray:
    """Clamp to ``p``'s range, counting clamped elements into ``counter`` under ``site``."""
    v = _as_int64(v)
    out = np.clip(v, p.qmin, p.qmax)
    if counter is not None:
        counter.add(site, int(np.count_nonzero(out != v)))
    return out


def saturate_acc(
    v: np.ndarray | int, counter: SaturationCounter | None = None, site: str = ""
) -> np.ndarray:
    """Clamp to the 48-bit accumulator range."""
    v = _as_int64(v)
    out = np.clip(v, ACC_MIN, ACC_MAX)
    if counter is not None:
        counter.add(site, int(np.count_nonzero(out != v)))
    return out


def narrow(
    acc: np.ndarray | int,
    shift: int,
    p: Precision,
    counter: SaturationCounter | None = None,
    site: str = "",
) -> np.ndarray:
    """Round away ``shift`` fraction bits, then saturate to ``p``: every narrowing uses this."""
    return saturate(round_shift(acc, shift), p, counter, site)


def quantize(
    x: np.ndarray | float, p: Precision, counter: SaturationCounter | None = None, site: str = ""
) -> np.ndarray:
    """Real values to fixed point: ``floor(x * 2**frac + 1/2)``, saturated."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise NumericsError(f"cannot quantize non-finite values at {site or 'input'}")
    # clip in float first (exact: integers over a power of two) so nothing overflows
    scaled = np.clip(x, (p.qmin - 1) / p.one, (p.qmax + 1) / p.one) * float(p.one)
    low = np.floor(scaled)
    # floor(scaled + 1/2) exactly: the float sum can round up across an integer
    # (0.49999999999999994 + 0.5 == 1.0)
    rounded = low + (scaled - low >= 0.5)
    clipped = np.clip(rounded, p.qmin, p.qmax)
    if counter is not None:
        counter.add(site, int(np.count_nonzero(clipped != rounded)))
    return clipped.astype(np.int64)


def dequantize(q: np.ndarray | int, p: Precision) -> np.ndarray:
    return _as_int64(q).astype(np.float64) / float(p.one)


def requantize(
    q: np.ndarray | int,
    src: Precision,
    dst: Precision,
    counter: SaturationCounter | None = None,
    site: str = "",
) -> np.ndarray:
    """Move integers from one precision to another with the one narrowing rule."""
    return narrow(q, src.frac - dst.frac, dst, counter, site)


def max_fan_in(a: Precision, b: Precision) -> int:
    """The most products of ``a x b`` values a 48-bit accumulator can sum without overflow."""
    largest_product = (1 << (a.width - 1)) * (1 << (b.width - 1))
    return ACC_MAX // largest_product


# --- lookup tables for nonlinearities -------------------------------------------------------

LUT_INDEX_BITS = 10  # at most 1024 entries per table
LUT_RANGE_EXP = 3  # tables cover inputs in [-8, 8); outside, the end entries hold

_LUT_FUNCTIONS = {
    "tanh": math.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
}
LUT_KINDS = tuple(_LUT_FUNCTIONS)


@dataclass(frozen=True)
class ActivationTable:
    """A nonlinearity as a table over the input's integer range (same table in C++ and SV).

    The input ``q`` (precision ``prec``) is clamped to ``[lo, hi]``, then
    ``index = (q - lo) >> shift``. Entry ``i`` is the function at the middle of its bin,
    quantised to ``prec``.
    """

    kind: str
    prec: Precision
    index_bits: int
    shift: int
    lo: int
    hi: int
    values: tuple[int, ...]

    def lookup(self, q: np.ndarray) -> np.ndarray:
        idx = (np.clip(_as_int64(q), self.lo, self.hi) - self.lo) >> self.shift
        return np.asarray(self.values, dtype=np.int64)[idx]


_TABLE_CACHE: dict[tuple[str, Precision], ActivationTable] = {}


def activation_table(kind: str, prec: Precision) -> ActivationTable:
    """Build (once) the lookup table of ``kind`` for inputs and outputs in ``prec``."""
    key = (kind, prec)
    if key in _TABLE_CACHE:
        return _TABLE_CACHE[key]
    if kind not in _LUT_FUNCTIONS:
        raise NumericsError(f"no lookup table for {kind!r}; known: {', '.join(LUT_KINDS)}")
    fn = _LUT_FUNCTIONS[kind]
    span_bits = prec.frac + LUT_RANGE_EXP + 1  # log2 of the number of integers in [-R, R)
    index_bits = min(LUT_INDEX_BITS, span_bits, prec.width)
    shift = span_bits - index_bits
    lo = max(-(1 << (prec.frac + LUT_RANGE_EXP)), prec.qmin)
    hi = min((1 << (prec.frac + LUT_RANGE_EXP)) - 1, prec.qmax)
    n = ((hi - lo) >> shift) + 1
    mid = lo + np.arange(n, dtype=np.float64) * (1 << shift) + ((1 << shift) - 1) / 2.0
    real = np.array([fn(m / prec.one) for m in mid])
    values = tuple(int(v) for v in quantize(real, prec))
    table = ActivationTable(kind, prec, index_bits, shift, lo, hi, values)
    _TABLE_CACHE[key] = table
    return table


def lut_error_bound(table: ActivationTable) -> float:
    """The worst real-valued error of ``table`` against its function (used by tests and docs).

    Half a bin times the function's steepest slope, plus half an LSB for rounding the entry,
    plus the function's change beyond the clamped range.
    """
    fn = _LUT_FUNCTIONS[table.kind]
    max_slope = 1.0 if table.kind == "tanh" else 0.25
    half_bin = ((1 << table.shift) - 1) / 2.0 / table.prec.one
    lo, hi = table.lo / table.prec.one, table.hi / table.prec.one
    tail = max(abs(1.0 - fn(hi)), abs(fn(lo) - (-1.0 if table.kind == "tanh" else 0.0)))
    return half_bin * max_slope + table.prec.lsb / 2 + tail + 1e-12


# --- the loss in fixed point (docs/contracts.md, Numerics: the loss) -------------------------
# One definition for a Loss node wherever it runs in fixed point (the host's numpy kernel, the
# numpy device model, the C++ and RTL kernels, whose tables and constants are generated from
# these): integer arithmetic only, so every executor reports the same loss words and gradients.

LOSS_FRAC = 16  # fraction bits of a softmax_ce loss word (mse's: loss_frac, exact)
EXP_FRAC = 16  # fraction bits of the exp table's entries: exp(0) = 1 << EXP_FRAC
EXP_RANGE_EXP = 4  # exp(-u) is tabulated for u in [0, 16); beyond, it holds (exp(-16) rounds to 0)
RECIP_SHIFT = 48  # softmax_j = e_j * floor(2**RECIP_SHIFT / sum e), RECIP_SHIFT fraction bits
LOG_INDEX_BITS = 10  # ln(1 + m) for a mantissa m indexed by its top 10 bits after the leading one


@dataclass(frozen=True)
class LossTables:
    """The exp and log tables of softmax cross-entropy over ``prec`` (the prediction's precision).

    ``exp(u)`` for ``u = max(p) - p >= 0``: ``c = min(u, umax)`` is split as ``c = hi << lo_bits |
    lo`` and ``exp(-c) = round_shift(exp_hi[hi] * exp_lo[lo], EXP_FRAC)``, each entry the
    function at its grid point quantised to ``EXP_FRAC`` bits (two small tables and one multiply
    instead of one large table). ``ln_ratio(s)`` is ``ln(s / 2**EXP_FRAC)`` for a softmax
    denominator ``s >= 2**EXP_FRAC``: ``k`` = the leading one's position, ``(k - EXP_FRAC) * ln2 +
    log[(s >> (k - LOG_INDEX_BITS)) & mask]``, the table holding ``ln(1 + (i + 1/2) / 2**bits)``
    (bins' midpoints), all in ``LOSS_FRAC`` bits.
    """

    prec: Precision
    lo_bits: int
    umax: int
    exp_hi: tuple[int, ...]
    exp_lo: tuple[int, ...]
    log: tuple[int, ...]
    ln2: int
    # the module's constants, for the generators: the tables and the rules that read them
    exp_frac: int = EXP_FRAC
    recip_shift: int = RECIP_SHIFT
    loss_frac: int = LOSS_FRAC
    log_index_bits: int = LOG_INDEX_BITS

    def exp(self, u: np.ndarray) -> np.ndarray:
        c = np.minimum(_as_int64(u), self.umax)
        hi = np.asarray(self.exp_hi, dtype=np.int64)[c >> self.lo_bits]
        lo = np.asarray(self.exp_lo, dtype=np.int64)[c & ((1 << self.lo_bits) - 1)]
        return round_shift(hi * lo, EXP_FRAC)

    def ln_ratio(self, s: np.ndarray) -> np.ndarray:
        s = _as_int64(s)
        k = np.frexp(s.astype(np.float64))[1].astype(np.int64) - 1  # the leading one (exact: s < 2**53)
        idx = (s >> (k - LOG_INDEX_BITS)) & ((1 << LOG_INDEX_BITS) - 1)
        return (k - EXP_FRAC) * self.ln2 + np.asarray(self.log, dtype=np.int64)[idx]


def loss_frac(fn: str, data: Precision) -> int:
    """Fraction bits of a loss word: mse's ``0.5 * sum d^2`` is exact in ``2 * data.frac + 1``
    bits (so a fixed-point mse loss is the float one), softmax_ce's is ``LOSS_FRAC``."""
    return 2 * data.frac + 1 if fn == "mse" else LOSS_FRAC


_LOSS_TABLES: dict[Precision, LossTables] = {}
_ENTRY = Precision(32, EXP_FRAC)  # table entries: exp values in [0, 1], logs below 1


def loss_tables(prec: Precision) -> LossTables:
    """Build (once) the softmax cross-entropy tables for predictions in ``prec``."""
    if prec in _LOSS_TABLES:
        return _LOSS_TABLES[prec]
    span = prec.frac + EXP_RANGE_EXP  # bits of u's tabulated range
    lo_bits = span // 2
    hi = np.arange(1 << (span - lo_bits), dtype=np.float64) * (1 << lo_bits)
    lo = np.arange(1 << lo_bits, dtype=np.float64)
    mid = (np.arange(1 << LOG_INDEX_BITS, dtype=np.float64) + 0.5) / (1 << LOG_INDEX_BITS)
    table = LossTables(
        prec=prec,
        lo_bits=lo_bits,
        umax=(1 << span) - 1,
        exp_hi=tuple(int(v) for v in quantize(np.exp(-hi / prec.one), _ENTRY)),
        exp_lo=tuple(int(v) for v in quantize(np.exp(-lo / prec.one), _ENTRY)),
        log=tuple(int(v) for v in quantize(np.log1p(mid), Precision(32, LOSS_FRAC))),
        ln2=int(quantize(math.log(2.0), Precision(32, LOSS_FRAC))),
    )
    _LOSS_TABLES[prec] = table
    return table


@dataclass(frozen=True)
class FixedLoss:
    """A batch of Loss messages evaluated in fixed point: per message the loss word (``loss_frac``
    bits) and the metric word (mse: the exact sum of ``|p - t|`` in data precision; softmax_ce: 1
    when every row's first argmax is its label, else 0); the gradient rows (grads precision)."""

    dy: np.ndarray
    loss: np.ndarray
    metric: np.ndarray


def loss_fixed(
    fn: str, p: np.ndarray, t: np.ndarray, starts: np.ndarray, numerics: NumericConfig,
    counter: SaturationCounter | None = None, site: str = "",
) -> FixedLoss:
    """The fixed-point loss of stacked rows (``starts``: each message's first row).

    mse: ``d = p - t``; ``dy = narrow(d, data.frac - grads.frac, grads)``; loss word ``sum d*d``
    over the message (exact: ``0.5 * sum d^2`` in ``2 * data.frac + 1`` fraction bits).
    softmax_ce (``t``: the label column), per row: ``u = max(p) - p``, ``e = exp(u)``
    (``LossTables``), ``s = sum e``, ``r = floor(2**RECIP_SHIFT / s)``;
    ``dy = narrow(e * r - onehot << RECIP_SHIFT, RECIP_SHIFT - grads.frac, grads)``; the row's loss
    ``u[label] << (LOSS_FRAC - data.frac)`` plus ``ln_ratio(s)``, summed over the message's rows.
    """
    data, grads = numerics.data, numerics.grads
    p = _as_int64(p)
    if fn == "mse":
        d = p - _as_int64(t)
        dy = narrow(d, data.frac - grads.frac, grads, counter, site)
        loss = np.add.reduceat(np.sum(d * d, axis=1), starts)
        metric = np.add.reduceat(np.sum(np.abs(d), axis=1), starts)
        return FixedLoss(dy, loss, metric)
    tables = loss_tables(data)
    labels = _as_int64(t)[:, 0]
    rows = np.arange(p.shape[0])
    u = p.max(axis=1, keepdims=True) - p
    e = tables.exp(u)
    s = e.sum(axis=1)
    r = (np.int64(1) << RECIP_SHIFT) // s
    onehot = np.zeros_like(p)
    onehot[rows, labels] = np.int64(1) << RECIP_SHIFT
    dy = narrow(e * r[:, None] - onehot, RECIP_SHIFT - grads.frac, grads, counter, site)
    row_loss = (u[rows, labels] << (LOSS_FRAC - data.frac)) + tables.ln_ratio(s)
    right = (np.argmax(p, axis=1) == labels).astype(np.int64)
    return FixedLoss(dy, np.add.reduceat(row_loss, starts), np.minimum.reduceat(right, starts))


def ce_error_bound(numerics: NumericConfig, width: int) -> tuple[float, float]:
    """How far the fixed softmax_ce may be from its float definition on a row of ``width``
    classes: (gradient element, loss per row). The tables' entries are within half an LSB of
    their function, so an exp value within 1.5 ``EXP_FRAC`` LSBs (and exp(-16) beyond the
    range), the denominator within ``width`` times that; then the reciprocal's floor, the
    output's rounding (half a grads LSB), the log table's half bin and its rounding, and ln2's
    rounding times the exponent (at most 13 for ``width <= 4096``)."""
    lsb = 2.0 ** -EXP_FRAC
    e_err = 1.5 * lsb + math.exp(-(1 << EXP_RANGE_EXP))
    softmax = e_err * (width + 1) + 2.0 ** -(RECIP_SHIFT - EXP_FRAC - 13)
    grad = softmax + numerics.grads.lsb / 2
    loss_lsb = 2.0 ** -LOSS_FRAC
    loss = width * e_err + 2.0 ** -(LOG_INDEX_BITS + 1) + loss_lsb / 2 + 14 * loss_lsb / 2
    return grad, loss
