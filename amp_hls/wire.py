"""The device wire format: the one definition every executor and code generator uses (docs/contracts.md, Wire format).

The C++ header constants and the SystemVerilog package are *generated* from
:func:`wire_constants`; nothing here may be retyped elsewhere.

Layout
------
AXI-stream, 64-bit beats, little-endian. A message is::

    beat 0        header (fields below)
    beat 1        state: word i (unsigned 16-bit) at bits [16*i, 16*i + 16), i < 4;
                  words at index >= state_len are 0
    beat 2 ...    payload, row by row; TLAST on the last beat of the message only

Header beat (``HEADER_FIELDS``)::

    bits  0..7    channel    channel id, 0..255 (see ChannelMap)
    bit   8       direction  0 = FWD, 1 = BWD (amp_hls.message.Direction)
    bits  9..11   kind       Kind: DATA=0, WEIGHTS=1, GRADS=2, CTRL=3, STATS=4, LOSS=5
    bits 12..14   state_len  number of state words, 0..4
    bit  15       reserved   must be 0
    bits 16..31   rows       payload rows, 1..max_rows of the channel's Shape for the kind
    bits 32..63   key        instance key, unsigned 32-bit

Payload: elements are signed two's complement of ``ELEMENT_BITS[kind]`` bits (DATA and WEIGHTS
16, GRADS 64 -- 48-bit accumulators sign-extended --, CTRL, STATS and LOSS 64). With
``epb = 64 // bits`` elements per beat, element j of a row sits at bits
``[bits * (j % epb), bits * (j % epb) + bits)`` of beat ``j // epb`` of that row. Each row is
padded to whole beats with zero elements, so a row takes ``ceil(width / epb)`` beats. The width
is not on the wire: it comes from the channel's :class:`Shape` for the kind, so both ends must
share one :class:`ChannelMap`.

A byte stream (DMA buffer) is the beats as little-endian uint64, concatenated; it has no TLAST,
message boundaries follow from the headers.

Lanes (inside the device only)
------------------------------
A row-wise kernel with ``lanes`` L > 1 reads and writes streams of ``64 L``-bit beats: the same
message, each beat ``L`` of the 64-bit ones side by side (beat ``i`` of the group at bits
``[64 i, 64 i + 64)``). The header and the state beat each take a whole wide beat (in its low 64
bits, the rest zero); each row is padded to whole wide beats, so it takes
``ceil(width / (epb L))`` of them. Element ``j`` of a row then sits at bits ``[bits j', ...)``
with ``j' = j % (epb L)``, as on the narrow stream. ``to_lanes`` and ``from_lanes`` are the
reference of the converters (hw/rtl/amp_lanes.sv) between a narrow and a wide stream; the host
link is always 64 bits.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from .errors import WireError
from .message import MAX_STATE_WORDS, Direction, Message, Tag
from .numerics import ACC_BITS

BEAT_BITS = 64
BEAT_BYTES = BEAT_BITS // 8
STATE_WORDS = MAX_STATE_WORDS
STATE_WORD_BITS = 16
HEADER_BEATS = 2  # header beat + state beat

_BEAT_DTYPE = np.dtype("<u8")  # explicit little-endian, whatever the host


class Field(NamedTuple):
    """One bit field of the header beat."""

    name: str
    lsb: int
    bits: int

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def max(self) -> int:
        return self.mask


HEADER_FIELDS: tuple[Field, ...] = (
    Field("channel", 0, 8),
    Field("direction", 8, 1),
    Field("kind", 9, 3),
    Field("state_len", 12, 3),
    Field("reserved", 15, 1),
    Field("rows", 16, 16),
    Field("key", 32, 32),
)
_FIELDS: dict[str, Field] = {f.name: f for f in HEADER_FIELDS}
_UNPACK = tuple((f.name, f.lsb, f.mask) for f in HEADER_FIELDS)


class Kind(IntEnum):
    """What a message's payload is; selects the element width on the wire."""

    DATA = 0
    WEIGHTS = 1
    GRADS = 2
    CTRL = 3
    STATS = 4
    LOSS = 5  # a device Loss node's report of one instance's message: LOSS_FIELDS


# A LOSS message (device -> host, direction FWD, the tag of the prediction it judges): one row
# of LOSS_WIDTH 64-bit words. ``loss``: the loss in numerics.LOSS_FRAC fraction bits; ``metric``:
# softmax_ce 1 when every row was classified right (else 0), mse the exact sum of |p - t| in the
# data precision; ``rows``: the prediction's rows (numerics.loss_fixed defines the words).
LOSS_FIELDS = ("loss", "metric", "rows")
LOSS_WIDTH = len(LOSS_FIELDS)

# A GRADS dump's tag: key = the node's dump number; state = GRADS_STATE, word by word: ``version``,
# the weights version the device was using (mod 2**16), and ``count``, the backward messages the
# dump sums (1..65535: the parameter server scales by it, not by a fixed muf).
GRADS_STATE = ("version", "count")

ELEMENT_BITS: Mapping[Kind, int] = MappingProxyType(
    {
        Kind.DATA: 16,
        Kind.WEIGHTS: 16,
        Kind.GRADS: 64,  # 48-bit accumulators, sign-extended to 64
        Kind.CTRL: 64,
        Kind.STATS: 64,
        Kind.LOSS: 64,
    }
)
# The value range each element must stay in: GRADS travel in 64-bit lanes but hold 48-bit
# accumulators (the DSP48 P register), so a value outside 48 bits is malformed.
VALUE_BITS: Mapping[Kind, int] = MappingProxyType(
    {k: (ACC_BITS if k is Kind.GRADS else ELEMENT_BITS[k]) for k in Kind}
)
_ELEMENT_DTYPE: Mapping[int, np.dtype] = MappingProxyType(
    {16: np.dtype("<i2"), 32: np.dtype("<i4"), 64: np.dtype("<i8")}
)

MAX_CHANNELS = 1 << _FIELDS["channel"].bits
MAX_ROWS = _FIELDS["rows"].max
MAX_KEY = _FIELDS["key"].max
MAX_STATE_WORD = (1 << STATE_WORD_BITS) - 1
# The bits a tag table keys on (the RTL's amp_tag_table): the key, the state length and every
# state word (unused words zero).
TAG_BITS = _FIELDS["key"].bits + _FIELDS["state_len"].bits + STATE_WORDS * STATE_WORD_BITS


def _check_layout() -> None:
    """Fail at import if the field table is inconsistent (overlap, gap, or too wide a field)."""
    covered = 0
    for f in HEADER_FIELDS:
        span = f.mask << f.lsb
        assert f.bits > 0 and f.lsb + f.bits <= BEAT_BITS and not covered & span, f
        covered |= span
    assert covered == (1 << BEAT_BITS) - 1, "header fields must cover the beat exactly"
    assert STATE_WORDS * STATE_WORD_BITS <= BEAT_BITS
    assert STATE_WORDS <= _FIELDS["state_len"].max
    assert max(Kind) <= _FIELDS["kind"].max and max(Direction) <= _FIELDS["direction"].max
    assert all(BEAT_BITS % bits == 0 and bits in _ELEMENT_DTYPE for bits in ELEMENT_BITS.values())


_check_layout()


def elements_per_beat(kind: Kind) -> int:
    return BEAT_BITS // ELEMENT_BITS[kind]


def beats_per_row(kind: Kind, width: int, lanes: int = 1) -> int:
    """Beats of one row, on a stream of ``lanes`` 64-bit beats side by side."""
    return -(-width // (elements_per_beat(kind) * lanes))


def parts_on_beats(widths: Sequence[int], lanes: int = 1) -> bool:
    """Whether DATA parts of these widths, side by side in a row (a concat), each start on a beat
    (of ``lanes``): the joined row's beats are then the parts' own beats."""
    epb = elements_per_beat(Kind.DATA) * lanes
    return all(sum(widths[:p]) % epb == 0 for p in range(len(widths)))


def message_beats(kind: Kind, rows: int, width: int, lanes: int = 1) -> int:
    """Total beats of one message, header and state beats included (on a stream of ``lanes``)."""
    return HEADER_BEATS + rows * beats_per_row(Kind(kind), width, lanes)


def to_lanes(beats: Sequence[int], width: int, lanes: int, kind: Kind = Kind.DATA) -> list[int]:
    """One message's 64-bit beats as the beats of a stream of ``lanes`` (module docstring,
    Lanes): header and state alone, each row's beats ``lanes`` at a time, zero-padded."""
    bpr = beats_per_row(kind, width)
    rows, rest = divmod(len(beats) - HEADER_BEATS, bpr)
    if rest or rows < 0:
        raise WireError(f"{len(beats)} beats are not a message of rows of {bpr} beats")
    out = list(beats[:HEADER_BEATS])
    for r in range(rows):
        row = beats[HEADER_BEATS + r * bpr:HEADER_BEATS + (r + 1) * bpr]
        for g in range(0, bpr, lanes):
            out.append(sum(int(b) << (BEAT_BITS * i) for i, b in enumerate(row[g:g + lanes])))
    return out


def from_lanes(wide: Sequence[int], width: int, lanes: int, kind: Kind = Kind.DATA) -> list[int]:
    """``to_lanes`` undone: the 64-bit beats of one message given as its wide beats."""
    bpr, wpr = beats_per_row(kind, width), beats_per_row(kind, width, lanes)
    rows, rest = divmod(len(wide) - HEADER_BEATS, wpr)
    if rest or rows < 0:
        raise WireError(f"{len(wide)} beats are not a message of rows of {wpr} beats of {lanes} lanes")
    mask = (1 << BEAT_BITS) - 1
    out = [int(b) & mask for b in wide[:HEADER_BEATS]]
    for r in range(rows):
        row = wide[HEADER_BEATS + r * wpr:HEADER_BEATS + (r + 1) * wpr]
        out.extend((int(row[i // lanes]) >> (BEAT_BITS * (i % lanes))) & mask for i in range(bpr))
    return out


# --------------------------------------------------------------------------- header helpers


def pack_header(**fields: int) -> int:
    """Pack header fields (by name, as in HEADER_FIELDS) into a beat; missing fields are 0.

    Only checks that each value fits its field; semantic checks (known channel, ...) live in
    the encoder, which can name the channel.
    """
    word = 0
    for name, value in fields.items():
        f = _FIELDS.get(name)
        if f is None:
            raise WireError(f"unknown header field {name!r}")
        v = _as_int(value, f"header field {name}")
        if not 0 <= v <= f.max:
            raise WireError(f"header field {name}={v} does not fit {f.bits} bits")
        word |= v << f.lsb
    return word


def unpack_header(word: int) -> dict[str, int]:
    """Split a header beat into its fields (raw integers, no validation beyond 64 bits)."""
    w = _as_int(word, "header beat")
    if not 0 <= w < 1 << BEAT_BITS:
        raise WireError(f"header beat {w} is not a 64-bit unsigned value")
    return {name: (w >> lsb) & mask for name, lsb, mask in _UNPACK}


def pack_state(state: Sequence[int]) -> int:
    word = 0
    for i, s in enumerate(state):
        word |= s << (STATE_WORD_BITS * i)
    return word


def _to_int(value: Any) -> int | None:
    """``value`` as a Python int, or None if it is not an integer (bools are not)."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _as_int(value: Any, what: str) -> int:
    v = _to_int(value)
    if v is None:
        raise WireError(f"{what} must be an integer, got {type(value).__name__}")
    return v


def _pack_checked(**fields: int) -> int:
    """pack_header without the checks, for the encoder, which has checked every value."""
    return sum(fields[name] << lsb for name, lsb, _ in _UNPACK if name in fields)


# --------------------------------------------------------------------------- channels


class Shape(NamedTuple):
    """Payload shape a channel carries for one kind: fixed width, up to max_rows rows."""

    width: int
    max_rows: int


@dataclass(frozen=True)
class ChannelSpec:
    """One channel id: its name (for error messages and codegen) and the kinds it carries."""

    channel: int
    name: str
    shapes: Mapping[Kind, Shape] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cid = _as_int(self.channel, "channel id")
        if not 0 <= cid < MAX_CHANNELS:
            raise WireError(f"channel id {cid} ({self.name!r}) outside [0, {MAX_CHANNELS})")
        if not isinstance(self.name, str) or not self.name:
            raise WireError(f"channel {cid}: name must be a non-empty string")
        where = f"channel {cid} ({self.name!r})"
        shapes: dict[Kind, Shape] = {}
        for kind, shape in dict(self.shapes).items():
            try:
                k = Kind(kind)
            except ValueError:
                raise WireError(f"{where}: unknown kind {kind!r}") from None
            try:
                width, max_rows = (_as_int(v, f"{where} {k.name} shape") for v in shape)
            except (TypeError, ValueError):
                raise WireError(f"{where}: {k.name} shape must be (width, max_rows)") from None
            if width < 1:
                raise WireError(f"{where}: {k.name} width {width} < 1")
            if not 1 <= max_rows <= MAX_ROWS:
                raise WireError(f"{where}: {k.name} max_rows {max_rows} outside [1, {MAX_ROWS}]")
            shapes[k] = Shape(width, max_rows)
        object.__setattr__(self, "channel", cid)
        object.__setattr__(self, "shapes", MappingProxyType(shapes))

    def __str__(self) -> str:
        return f"channel {self.channel} ({self.name!r})"

    def shape(self, kind: Kind) -> Shape:
        """The shape for ``kind``; WireError if the channel does not carry that kind."""
        try:
            return self.shapes[kind]
        except KeyError:
            raise WireError(_not_allowed(self, kind)) from None


def _not_allowed(spec: ChannelSpec, kind: Kind) -> str:
    allowed = ", ".join(k.name for k in spec.shapes) or "none"
    return f"{spec}: kind {Kind(kind).name} not allowed (allowed: {allowed})"


class ChannelMap(Mapping[int, ChannelSpec]):
    """The channel table both ends of a link share: channel id -> ChannelSpec."""

    def __init__(self, specs: Iterable[ChannelSpec]):
        by_id: dict[int, ChannelSpec] = {}
        names: dict[str, int] = {}
        for spec in specs:
            if not isinstance(spec, ChannelSpec):
                raise WireError(f"ChannelMap takes ChannelSpec items, got {type(spec).__name__}")
            if spec.channel in by_id:
                raise WireError(f"duplicate channel id {spec.channel} ({spec.name!r})")
            if spec.name in names:
                raise WireError(
                    f"duplicate channel name {spec.name!r} (ids {names[spec.name]} and "
                    f"{spec.channel})"
                )
            by_id[spec.channel] = spec
            names[spec.name] = spec.channel
        self._by_id = by_id
        self._by_name = {name: by_id[cid] for name, cid in names.items()}

    def __getitem__(self, channel: int) -> ChannelSpec:
        return self._by_id[channel]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"ChannelMap({list(self._by_id.values())!r})"

    def spec(self, channel: int) -> ChannelSpec:
        """The spec of ``channel``; WireError if the id is unknown."""
        spec = self._by_id.get(channel)
        if spec is None:
            raise WireError(f"unknown channel {channel}")
        return spec

    def by_name(self, name: str) -> ChannelSpec:
        try:
            return self._by_name[name]
        except KeyError:
            raise WireError(f"unknown channel name {name!r}") from None


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True, eq=False)
class WireMessage:
    """A message as it travels on one channel; payload is int64, rows x width."""

    channel: int
    kind: Kind
    direction: Direction
    tag: Tag
    payload: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WireMessage):
            return NotImplemented
        return (
            self.channel == other.channel
            and self.kind == other.kind
            and self.direction == other.direction
            and self.tag == other.tag
            and self.payload.shape == other.payload.shape
            and bool(np.array_equal(self.payload, other.payload))
        )

    @classmethod
    def from_message(cls, channel: int, kind: Kind, msg: Message) -> WireMessage:
        return cls(channel, Kind(kind), msg.direction, msg.tag, msg.payload)

    def to_message(self) -> Message:
        return Message(self.tag, self.direction, self.payload)


# --------------------------------------------------------------------------- encode


def _check_payload(payload: Any, kind: Kind, shape: Shape, where: ChannelSpec) -> np.ndarray:
    if not isinstance(payload, np.ndarray):
        raise WireError(f"{where}: payload must be a numpy array, got {type(payload).__name__}")
    if payload.dtype.kind not in "iu":
        raise WireError(f"{where}: payload dtype {payload.dtype} is not an integer type")
    if payload.ndim != 2:
        raise WireError(f"{where}: payload must be 2-D (rows x width), got shape {payload.shape}")
    rows, width = payload.shape
    if width != shape.width:
        raise WireError(
            f"{where}: {kind.name} payload width {width} != channel width {shape.width}"
        )
    if not 1 <= rows <= shape.max_rows:
        raise WireError(f"{where}: {kind.name} payload rows {rows} outside [1, {shape.max_rows}]")
    bits = VALUE_BITS[kind]
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    pmin, pmax = int(payload.min()), int(payload.max())
    if pmin < lo or pmax > hi:
        bad = pmin if pmin < lo else pmax
        raise WireError(
            f"{where}: {kind.name} element {bad} does not fit {bits}-bit signed [{lo}, {hi}]"
        )
    return payload


def _payload_words(payload: np.ndarray, kind: Kind) -> np.ndarray:
    """Pack a checked payload into beats: pad each row to whole beats, reinterpret as uint64."""
    rows, width = payload.shape
    epb = elements_per_beat(kind)
    bpr = beats_per_row(kind, width)
    padded = np.zeros((rows, bpr * epb), dtype=_ELEMENT_DTYPE[ELEMENT_BITS[kind]])
    padded[:, :width] = payload  # values already range-checked, so the cast is exact
    return padded.view(_BEAT_DTYPE).reshape(-1)


def _encode_words(msg: WireMessage, channels: ChannelMap) -> np.ndarray:
    """Check one message against its channel and pack it (error strings built only on failure)."""
    if not isinstance(msg, WireMessage):
        raise WireError(f"expected a WireMessage, got {type(msg).__name__}")
    cid = _as_int(msg.channel, "channel id")
    spec = channels.spec(cid)
    kind = _KINDS.get(_to_int(msg.kind))  # type: ignore[arg-type]
    if kind is None:
        raise WireError(f"{spec}: unknown kind {msg.kind!r}")
    direction = _DIRECTIONS.get(_to_int(msg.direction))  # type: ignore[arg-type]
    if direction is None:
        raise WireError(f"{spec}: unknown direction {msg.direction!r}")
    shape = spec.shape(kind)
    tag = msg.tag
    if not isinstance(tag, tuple) or len(tag) != 2:
        raise WireError(f"{spec}: tag must be Tag(key, state), got {tag!r}")
    key = _to_int(tag[0])
    if key is None or not 0 <= key <= MAX_KEY:
        raise WireError(f"{spec}: key {tag[0]!r} outside [0, 2**32)")
    try:
        raw_state = tuple(tag[1])
    except TypeError:
        raise WireError(f"{spec}: state must be a tuple of integers") from None
    if len(raw_state) > STATE_WORDS:
        raise WireError(f"{spec}: {len(raw_state)} state words, at most {STATE_WORDS} fit a beat")
    state = tuple(map(_to_int, raw_state))
    for raw, s in zip(raw_state, state, strict=True):
        if s is None:
            raise WireError(f"{spec}: state word {raw!r} must be an integer")
        if not 0 <= s <= MAX_STATE_WORD:
            raise WireError(f"{spec}: state word {s} outside [0, 2**{STATE_WORD_BITS})")
    payload = _check_payload(msg.payload, kind, shape, spec)
    rows = payload.shape[0]

    out = np.empty(message_beats(kind, rows, shape.width), dtype=_BEAT_DTYPE)
    out[0] = _pack_checked(
        channel=cid, direction=direction, kind=kind, state_len=len(state), rows=rows, key=key
    )
    out[1] = pack_state(state)
    out[HEADER_BEATS:] = _payload_words(payload, kind)
    return out


def encode_beats(msg: WireMessage, channels: ChannelMap) -> tuple[np.ndarray, np.ndarray]:
    """One message as AXI-stream beats: (tdata uint64, tlast bool), TLAST on the last beat."""
    data = _encode_words(msg, channels).astype(np.uint64, copy=False)
    last = np.zeros(data.shape[0], dtype=bool)
    last[-1] = True
    return data, last


def encode_bytes(msgs: Iterable[WireMessage], channels: ChannelMap) -> bytes:
    """Messages as one DMA byte buffer: the beats as little-endian uint64, concatenated."""
    return b"".join(_encode_words(m, channels).tobytes() for m in msgs)


# --------------------------------------------------------------------------- decode


class _Header(NamedTuple):
    spec: ChannelSpec
    kind: Kind
    direction: Direction
    state_len: int
    rows: int
    key: int
    width: int
    beats: int


_KINDS: dict[int, Kind] = {int(k): k for k in Kind}
_DIRECTIONS: dict[int, Direction] = {int(d): d for d in Direction}
_STATE_SHIFTS = tuple(STATE_WORD_BITS * i for i in range(STATE_WORDS))


def _parse_header(word: int, channels: ChannelMap, at: int) -> _Header:
    """Validate a header beat against the channel map; ``at`` (beat index) is for messages.

    Runs once per message on the host's hot path, so it avoids building strings until it fails.
    """
    h = unpack_header(word)
    spec = channels.get(h["channel"])
    if spec is None:
        raise WireError(f"beat {at}: unknown channel {h['channel']}")
    kind = _KINDS.get(h["kind"])
    shape = spec.shapes.get(kind) if kind is not None else None
    rows, state_len = h["rows"], h["state_len"]
    if h["reserved"] or shape is None or state_len > STATE_WORDS or not 1 <= rows <= shape.max_rows:
        where = f"beat {at}: {spec}"
        if h["reserved"]:
            raise WireError(f"{where}: reserved header bit set (header {word:#018x})")
        if kind is None:
            raise WireError(f"{where}: unknown kind value {h['kind']}")
        if shape is None:
            raise WireError(f"beat {at}: {_not_allowed(spec, kind)}")
        if state_len > STATE_WORDS:
            raise WireError(f"{where}: state_len {state_len} > {STATE_WORDS}")
        raise WireError(f"{where}: {kind.name} rows {rows} outside [1, {shape.max_rows}]")
    return _Header(
        spec,
        kind,
        _DIRECTIONS[h["direction"]],
        state_len,
        rows,
        h["key"],
        shape.width,
        message_beats(kind, rows, shape.width),
    )


def _decode_body(h: _Header, words: np.ndarray, at: int) -> WireMessage:
    """Decode state and payload beats (``words`` = the whole message, little-endian uint64)."""
    state_word = int(words[1])
    state = tuple((state_word >> shift) & MAX_STATE_WORD for shift in _STATE_SHIFTS)
    if any(state[h.state_len :]):
        raise WireError(f"beat {at}: {h.spec}: nonzero state words beyond state_len {h.state_len}")
    elem = _ELEMENT_DTYPE[ELEMENT_BITS[h.kind]]
    grid = (
        np.ascontiguousarray(words[HEADER_BEATS:], dtype=_BEAT_DTYPE).view(elem).reshape(h.rows, -1)
    )
    if grid.shape[1] != h.width and np.any(grid[:, h.width :]):
        raise WireError(f"beat {at}: {h.spec}: nonzero padding elements in {h.kind.name} payload")
    payload = grid[:, : h.width].astype(np.int64)
    bits = VALUE_BITS[h.kind]
    if bits < ELEMENT_BITS[h.kind] and payload.size:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if int(payload.min()) < lo or int(payload.max()) > hi:
            raise WireError(f"beat {at}: {h.spec}: {h.kind.name} element outside {bits}-bit range")
    return WireMessage(
        h.spec.channel, h.kind, h.direction, Tag(h.key, state[: h.state_len]), payload
    )


def _as_beats(data: Any) -> np.ndarray:
    """Coerce tdata to a 1-D little-endian uint64 array, refusing anything not 0..2**64-1."""
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError, OverflowError) as e:
        raise WireError(f"tdata is not an array of integers: {e}") from None
    if arr.ndim != 1:
        raise WireError(f"tdata must be 1-D, got shape {arr.shape}")
    if arr.size == 0:  # np.asarray([]) is float64
        return np.zeros(0, dtype=_BEAT_DTYPE)
    if arr.dtype == object:
        try:
            ints = [_as_int(x, "tdata beat") for x in arr]
        except WireError:
            raise WireError("tdata holds non-integer beats") from None
        if any(not 0 <= x < 1 << BEAT_BITS for x in ints):
            raise WireError("tdata beat outside [0, 2**64)")
        return np.array(ints, dtype=_BEAT_DTYPE)
    if arr.dtype.kind not in "iu":
        raise WireError(f"tdata dtype {arr.dtype} is not an integer type")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise WireError("tdata holds negative beats")
    if arr.dtype.itemsize > BEAT_BYTES:
        raise WireError(f"tdata dtype {arr.dtype} is wider than a beat")
    return arr.astype(_BEAT_DTYPE)


def _as_last(last: Any) -> np.ndarray:
    try:
        arr = np.asarray(last)
    except (TypeError, ValueError, OverflowError) as e:
        raise WireError(f"tlast is not an array of flags: {e}") from None
    if arr.ndim != 1:
        raise WireError(f"tlast must be 1-D, got shape {arr.shape}")
    if arr.dtype == bool or arr.size == 0:
        return arr.astype(bool, copy=False)
    if arr.dtype.kind in "iu" and int(arr.min()) >= 0 and int(arr.max()) <= 1:
        return arr.astype(bool)
    raise WireError(f"tlast must hold booleans (or 0/1), got dtype {arr.dtype}")


def _decode_words(
    words: np.ndarray, last: np.ndarray | None, channels: ChannelMap
) -> list[WireMessage]:
    """Decode back-to-back messages; ``last`` None means a byte stream (no TLAST to check)."""
    out: list[WireMessage] = []
    n = words.shape[0]
    pos = 0
    while pos < n:  # every iteration consumes >= 3 beats or raises: it terminates
        h = _parse_header(int(words[pos]), channels, pos)
        end = pos + h.beats
        if last is not None:
            early = np.flatnonzero(last[pos : min(end, n) - 1])
            if early.size:
                raise WireError(
                    f"beat {pos}: {h.spec}: early TLAST at beat {pos + int(early[0])}, "
                    f"message has {h.beats} beats"
                )
        if end > n:
            raise WireError(
                f"beat {pos}: {h.spec}: truncated message, {h.beats} beats needed, {n - pos} left"
            )
        if last is not None and not last[end - 1]:
            raise WireError(f"beat {pos}: {h.spec}: missing TLAST on beat {end - 1}")
        out.append(_decode_body(h, words[pos:end], pos))
        pos = end
    return out


def decode_beats(data: Any, last: Any, channels: ChannelMap) -> list[WireMessage]:
    """Decode AXI-stream beats (tdata, tlast) holding zero or more whole messages."""
    words = _as_beats(data)
    flags = _as_last(last)
    if words.shape[0] != flags.shape[0]:
        raise WireError(f"tdata has {words.shape[0]} beats but tlast has {flags.shape[0]}")
    return _decode_words(words, flags, channels)


def _as_buffer(buf: Any) -> memoryview:
    try:
        view = memoryview(buf)
    except TypeError:
        raise WireError(f"expected a bytes-like buffer, got {type(buf).__name__}") from None
    try:
        return view.cast("B")
    except (TypeError, ValueError):
        raise WireError("buffer is not a contiguous byte buffer") from None


def decode_bytes(buf: Any, channels: ChannelMap) -> list[WireMessage]:
    """Decode a DMA byte buffer holding zero or more whole messages."""
    view = _as_buffer(buf)
    if len(view) % BEAT_BYTES:
        raise WireError(
            f"{len(view) % BEAT_BYTES} trailing bytes: {len(view)} bytes is not whole beats"
        )
    return _decode_words(np.frombuffer(view, dtype=_BEAT_DTYPE), None, channels)


# --------------------------------------------------------------------------- many at once


def _header_word(channel: int, direction: int, kind: int, state_len: int, rows: int, key: int) -> int:
    return (channel << _FIELDS["channel"].lsb | direction << _FIELDS["direction"].lsb | kind << _FIELDS["kind"].lsb
            | state_len << _FIELDS["state_len"].lsb | rows << _FIELDS["rows"].lsb | key << _FIELDS["key"].lsb)


def encode_many(msgs: Sequence[WireMessage], channels: ChannelMap) -> bytes:
    """``encode_bytes(msgs)``: the same bytes after the same checks, with the messages of one
    channel, kind and shape checked and packed as one array (a host sends thousands of small
    messages a second). Anything unusual goes to ``encode_bytes``, which names the fault."""
    if len(msgs) < 4:
        return encode_bytes(msgs, channels)
    n = len(msgs)
    heads = [0] * n
    states = [0] * n
    groups: dict[tuple[int, Kind, int, int], list[int]] = {}
    for i, m in enumerate(msgs):
        payload = m.payload if type(m) is WireMessage else None
        kind = _KINDS.get(_to_int(m.kind)) if payload is not None else None  # type: ignore[union-attr]
        direction = _DIRECTIONS.get(_to_int(m.direction)) if kind is not None else None  # type: ignore[union-attr]
        tag = m.tag if direction is not None else None  # type: ignore[union-attr]
        if (tag is None or type(payload) is not np.ndarray or payload.ndim != 2 or payload.dtype.kind not in "iu"
                or type(tag) is not Tag):
            return encode_bytes(msgs, channels)
        key, state = tag
        if type(key) is not int or not 0 <= key <= MAX_KEY or len(state) > STATE_WORDS:
            return encode_bytes(msgs, channels)
        word = 0
        for j, w in enumerate(state):
            if type(w) is not int or not 0 <= w <= MAX_STATE_WORD:
                return encode_bytes(msgs, channels)
            word |= w << _STATE_SHIFTS[j]
        rows, width = payload.shape
        heads[i] = _header_word(m.channel, direction, kind, len(state), rows, key)  # type: ignore[union-attr]
        states[i] = word
        groups.setdefault((m.channel, kind, rows, width), []).append(i)  # type: ignore[union-attr]
    sizes = np.empty(n, dtype=np.int64)
    packed = []
    for (channel, kind, rows, width), idx in groups.items():
        spec = channels.get(channel) if type(channel) is int else None
        shape = spec.shapes.get(kind) if spec is not None else None
        if shape is None or width != shape.width or not 1 <= rows <= shape.max_rows:
            return encode_bytes(msgs, channels)
        stack = np.stack([msgs[i].payload for i in idx]).reshape(len(idx) * rows, width)
        bits = VALUE_BITS[kind]
        if stack.size and (int(stack.min()) < -(1 << (bits - 1)) or int(stack.max()) > (1 << (bits - 1)) - 1):
            return encode_bytes(msgs, channels)
        words = _payload_words(stack, kind).reshape(len(idx), -1)
        sizes[idx] = HEADER_BEATS + words.shape[1]
        packed.append((np.asarray(idx), words))
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    out = np.empty(int(sizes.sum()), dtype=_BEAT_DTYPE)
    out[starts] = np.array(heads, dtype=np.uint64)
    out[starts + 1] = np.array(states, dtype=np.uint64)
    for idx, words in packed:
        out[(starts[idx] + HEADER_BEATS)[:, None] + np.arange(words.shape[1])] = words
    return out.tobytes()


def decode_many(buf: Any, channels: ChannelMap) -> list[WireMessage]:
    """``decode_bytes(buf)``: the same messages after the same checks, the payloads of one
    channel, kind and row count decoded as one array. Anything unusual goes to
    ``decode_bytes``, which names the fault."""
    view = _as_buffer(buf)
    if len(view) % BEAT_BYTES:
        return decode_bytes(buf, channels)
    words = np.frombuffer(view, dtype=_BEAT_DTYPE)
    ints = words.tolist()
    n = len(ints)
    found: list[tuple[int, ChannelSpec, Kind, Direction, int, int, int]] = []
    groups: dict[tuple[int, Kind, int], list[int]] = {}
    low_bits = _FIELDS["rows"].lsb  # channel, direction, kind, state_len, reserved
    low_mask, rows_mask = (1 << low_bits) - 1, _FIELDS["rows"].mask
    key_lsb = _FIELDS["key"].lsb
    seen: dict[int, tuple[ChannelSpec, Kind, Shape, Direction, int] | None] = {}
    sizes: dict[tuple[int, int], int] = {}
    pos = 0
    while pos < n:
        h = ints[pos]
        low = h & low_mask
        meta = seen.get(low, False)
        if meta is False:
            meta = _decode_low(low, channels)
            seen[low] = meta
        rows = (h >> low_bits) & rows_mask
        if meta is None or not 1 <= rows <= meta[2].max_rows:
            return decode_bytes(buf, channels)
        spec, kind, shape, direction, state_len = meta
        beats = sizes.get((low, rows))
        if beats is None:
            beats = sizes[(low, rows)] = HEADER_BEATS + rows * beats_per_row(kind, shape.width)
        if pos + beats > n:
            return decode_bytes(buf, channels)
        groups.setdefault((spec.channel, kind, rows), []).append(len(found))
        found.append((pos, spec, kind, direction, state_len, rows, h >> key_lsb))
        pos += beats
    payloads: list[np.ndarray | None] = [None] * len(found)
    for (_, kind, rows), idx in groups.items():
        width = found[idx[0]][1].shapes[kind].width
        per = rows * beats_per_row(kind, width)
        at = np.array([found[i][0] for i in idx]) + HEADER_BEATS
        elem = _ELEMENT_DTYPE[ELEMENT_BITS[kind]]
        grid = np.ascontiguousarray(words[at[:, None] + np.arange(per)]).view(elem).reshape(len(idx), rows, -1)
        if grid.shape[2] != width and np.any(grid[:, :, width:]):
            return decode_bytes(buf, channels)
        values = grid[:, :, :width].astype(np.int64)
        bits = VALUE_BITS[kind]
        if bits < ELEMENT_BITS[kind] and values.size and (
                int(values.min()) < -(1 << (bits - 1)) or int(values.max()) > (1 << (bits - 1)) - 1):
            return decode_bytes(buf, channels)
        for j, i in enumerate(idx):
            payloads[i] = values[j]
    out = []
    new_tag = tuple.__new__
    for (at, spec, kind, direction, state_len, _, key), payload in zip(found, payloads):
        word = ints[at + 1]
        if word >> (STATE_WORD_BITS * state_len):
            return decode_bytes(buf, channels)
        state = () if not state_len else tuple((word >> _STATE_SHIFTS[j]) & MAX_STATE_WORD for j in range(state_len))
        out.append(WireMessage(spec.channel, kind, direction, new_tag(Tag, (key, state)), payload))  # type: ignore[arg-type]
    return out


def _decode_low(low: int, channels: ChannelMap) -> tuple[ChannelSpec, Kind, Shape, Direction, int] | None:
    """What a header's low bits (channel, direction, kind, state_len, reserved) say, or None
    when they break the format."""
    f = _FIELDS
    spec = channels.get((low >> f["channel"].lsb) & f["channel"].mask)
    kind = _KINDS.get((low >> f["kind"].lsb) & f["kind"].mask)
    shape = spec.shapes.get(kind) if spec is not None and kind is not None else None
    state_len = (low >> f["state_len"].lsb) & f["state_len"].mask
    if shape is None or (low >> f["reserved"].lsb) & f["reserved"].mask or state_len > STATE_WORDS:
        return None
    return spec, kind, shape, _DIRECTIONS[(low >> f["direction"].lsb) & f["direction"].mask], state_len  # type: ignore[return-value]


class StreamDecoder:
    """Incremental decoder for DMA reads that may split messages anywhere.

    A bad header is reported as soon as its beat arrives, not when the message completes. After
    a WireError the stream has lost sync, so the decoder refuses further input.
    """

    def __init__(self, channels: ChannelMap):
        self._channels = channels
        self._buf = bytearray()
        self._beats_seen = 0  # beats consumed so far, for error messages
        self._failed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of a partial message held back until the rest arrives."""
        return len(self._buf)

    def feed(self, chunk: Any) -> list[WireMessage]:
        """Add bytes; return the messages they complete."""
        if self._failed:
            raise WireError("stream decoder already failed; the stream is out of sync")
        self._buf += _as_buffer(chunk)
        out: list[WireMessage] = []
        start = 0
        try:
            while len(self._buf) - start >= BEAT_BYTES:
                header = int.from_bytes(self._buf[start : start + BEAT_BYTES], "little")
                h = _parse_header(header, self._channels, self._beats_seen)
                size = h.beats * BEAT_BYTES
                if len(self._buf) - start < size:
                    break
                raw = bytes(self._buf[start : start + size])  # a copy: _buf is resized below
                out.append(_decode_body(h, np.frombuffer(raw, dtype=_BEAT_DTYPE), self._beats_seen))
                start += size
                self._beats_seen += h.beats
        except WireError:
            self._failed = True
            raise
        finally:
            del self._buf[:start]
        return out

    def finish(self) -> None:
        """Declare end of stream; WireError if a partial message is left."""
        if self._buf:
            raise WireError(f"stream ended inside a message: {len(self._buf)} bytes pending")


# --------------------------------------------------------------------------- codegen


def wire_constants() -> dict[str, int]:
    """Every number of the format, named as C identifiers, for the C++ and SV generators."""
    c: dict[str, int] = {
        "BEAT_BITS": BEAT_BITS,
        "BEAT_BYTES": BEAT_BYTES,
        "HEADER_BEATS": HEADER_BEATS,
        "STATE_WORDS": STATE_WORDS,
        "STATE_WORD_BITS": STATE_WORD_BITS,
        "MAX_CHANNELS": MAX_CHANNELS,
        "MAX_ROWS": MAX_ROWS,
        "LOSS_WIDTH": LOSS_WIDTH,
        "TAG_BITS": TAG_BITS,
        "GRADS_STATE_LEN": len(GRADS_STATE),
        **{f"GRADS_STATE_{w.upper()}": i for i, w in enumerate(GRADS_STATE)},
    }
    for f in HEADER_FIELDS:
        c[f"HDR_{f.name.upper()}_LSB"] = f.lsb
        c[f"HDR_{f.name.upper()}_BITS"] = f.bits
    for d in Direction:
        c[f"DIR_{d.name}"] = int(d)
    for k in Kind:
        c[f"KIND_{k.name}"] = int(k)
    for k in Kind:
        c[f"ELEMENT_BITS_{k.name}"] = ELEMENT_BITS[k]
        c[f"VALUE_BITS_{k.name}"] = VALUE_BITS[k]
        c[f"ELEMENTS_PER_BEAT_{k.name}"] = elements_per_beat(k)
    return c
