"""The wire format (amp_hls.wire): layout, round trips, and rejection of every malformed input."""

from __future__ import annotations

import keyword
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amp_hls.errors import WireError
from amp_hls.message import Direction, Message, Tag
from amp_hls.wire import (
    BEAT_BITS,
    BEAT_BYTES,
    ELEMENT_BITS,
    HEADER_FIELDS,
    STATE_WORD_BITS,
    STATE_WORDS,
    VALUE_BITS,
    ChannelMap,
    ChannelSpec,
    Kind,
    Shape,
    StreamDecoder,
    WireMessage,
    decode_beats,
    decode_bytes,
    encode_beats,
    encode_bytes,
    message_beats,
    pack_header,
    unpack_header,
    wire_constants,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A fixed map for the explicit cases: every kind somewhere, odd widths so rows need padding.
CHANNELS = ChannelMap(
    [
        ChannelSpec(3, "fc1", {Kind.DATA: Shape(5, 4), Kind.GRADS: Shape(3, 2)}),
        ChannelSpec(7, "emb", {Kind.WEIGHTS: Shape(8, 3), Kind.CTRL: Shape(1, 1)}),
        ChannelSpec(255, "stats", {Kind.STATS: Shape(2, 1)}),
    ]
)


def elem_range(kind: Kind) -> tuple[int, int]:
    bits = VALUE_BITS[kind]
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def msg(
    channel: int = 3,
    kind: Kind = Kind.DATA,
    rows: int = 2,
    width: int | None = None,
    key: int = 42,
    state: tuple[int, ...] = (1, 2),
    direction: Direction = Direction.FWD,
    payload: np.ndarray | None = None,
) -> WireMessage:
    if payload is None:
        if width is None:
            width = CHANNELS[channel].shapes[kind].width
        payload = np.arange(rows * width, dtype=np.int64).reshape(rows, width) - 3
    return WireMessage(channel, kind, direction, Tag(key, state), payload)


def raises(match: str):
    return pytest.raises(WireError, match=match)


# --------------------------------------------------------------------------- strategies


@st.composite
def channel_maps(draw) -> ChannelMap:
    ids = draw(st.lists(st.integers(0, 255), min_size=1, max_size=4, unique=True))
    specs = []
    for i, cid in enumerate(ids):
        kinds = draw(st.lists(st.sampled_from(list(Kind)), min_size=1, max_size=5, unique=True))
        shapes = {k: Shape(draw(st.integers(1, 9)), draw(st.integers(1, 4))) for k in kinds}
        specs.append(ChannelSpec(cid, f"ch{i}_{cid}", shapes))
    return ChannelMap(specs)


def elements(kind: Kind) -> st.SearchStrategy[int]:
    lo, hi = elem_range(kind)
    extremes = st.sampled_from([lo, lo + 1, -1, 0, 1, hi - 1, hi])
    return st.one_of(extremes, st.integers(lo, hi))


@st.composite
def wire_messages(draw, channels: ChannelMap) -> WireMessage:
    spec = channels[draw(st.sampled_from(sorted(channels)))]
    kind = draw(st.sampled_from(sorted(spec.shapes)))
    width, max_rows = spec.shapes[kind]
    rows = draw(st.integers(1, max_rows))
    values = draw(st.lists(elements(kind), min_size=rows * width, max_size=rows * width))
    payload = np.array(values, dtype=np.int64).reshape(rows, width)
    key = draw(st.one_of(st.sampled_from([0, 1, 2**32 - 1]), st.integers(0, 2**32 - 1)))
    word = st.one_of(st.sampled_from([0, 2**16 - 1]), st.integers(0, 2**16 - 1))
    state = tuple(draw(st.lists(word, max_size=STATE_WORDS)))
    direction = draw(st.sampled_from(list(Direction)))
    return WireMessage(spec.channel, kind, direction, Tag(key, state), payload)


@st.composite
def streams(draw) -> tuple[ChannelMap, list[WireMessage]]:
    channels = draw(channel_maps())
    return channels, draw(st.lists(wire_messages(channels), max_size=4))


def concat_beats(msgs, channels) -> tuple[np.ndarray, np.ndarray]:
    parts = [encode_beats(m, channels) for m in msgs]
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    return np.concatenate([d for d, _ in parts]), np.concatenate([t for _, t in parts])


def stream_decode(buf: bytes, channels, chunks) -> list[WireMessage]:
    dec = StreamDecoder(channels)
    out: list[WireMessage] = []
    pos = 0
    for size in chunks:
        out += dec.feed(buf[pos : pos + size])
        pos += size
    out += dec.feed(buf[pos:])
    dec.finish()
    return out


# --------------------------------------------------------------------------- layout


def test_exact_bit_layout():
    """Hand-computed: a layout change must fail here."""
    channels = ChannelMap([ChannelSpec(5, "w", {Kind.WEIGHTS: Shape(5, 2)})])
    payload = np.array([[1, -1, 2, -32768, 32767], [0, 0, 0, 0, -2]], dtype=np.int64)
    m = WireMessage(5, Kind.WEIGHTS, Direction.BWD, Tag(0xDEADBEEF, (1, 2)), payload)
    data, last = encode_beats(m, channels)
    assert data.dtype == np.uint64
    assert [int(x) for x in data] == [
        0xDEADBEEF_0002_2305,  # key | rows=2 | reserved 0, state_len=2, kind=1, dir=1 | ch 5
        0x0000_0000_0002_0001,  # state words 1, 2
        0x8000_0002_FFFF_0001,  # row 0 elements 0..3, element 0 in the low bits
        0x0000_0000_0000_7FFF,  # row 0 element 4, then zero padding
        0x0000_0000_0000_0000,  # row 1 elements 0..3
        0x0000_0000_0000_FFFE,  # row 1 element 4 (-2)
    ]
    assert last.tolist() == [False] * 5 + [True]
    buf = encode_bytes([m], channels)
    assert buf[:16] == bytes.fromhex("05230200EFBEADDE0100020000000000")
    assert message_beats(Kind.WEIGHTS, 2, 5) == 6
    assert decode_bytes(buf, channels) == [m]


def test_grads_are_64_bit_sign_extended():
    channels = ChannelMap([ChannelSpec(1, "g", {Kind.GRADS: Shape(3, 1)})])
    acc = (1 << 47) - 1
    payload = np.array([[-1, -(1 << 47), acc]], dtype=np.int64)
    data, _ = encode_beats(WireMessage(1, Kind.GRADS, Direction.BWD, Tag(0), payload), channels)
    assert [int(x) for x in data[2:]] == [2**64 - 1, 2**64 - (1 << 47), acc]
    (back,) = decode_beats(data, [False, False, False, False, True], channels)
    assert back.payload.dtype == np.int64 and back.payload.tolist() == payload.tolist()


def test_message_beats():
    assert message_beats(Kind.DATA, 1, 1) == 3
    assert message_beats(Kind.DATA, 3, 4) == 5
    assert message_beats(Kind.DATA, 3, 5) == 8
    assert message_beats(Kind.GRADS, 2, 5) == 12
    assert message_beats(Kind.STATS, 1, 2) == 4


@given(st.fixed_dictionaries({f.name: st.integers(0, (1 << f.bits) - 1) for f in HEADER_FIELDS}))
@settings(max_examples=100, deadline=None)
def test_pack_unpack_header(fields):
    word = pack_header(**fields)
    assert 0 <= word < 1 << BEAT_BITS
    assert unpack_header(word) == fields


def test_pack_header_rejects():
    with raises("unknown header field"):
        pack_header(colour=1)
    with raises("does not fit 8 bits"):
        pack_header(channel=256)
    with raises("does not fit"):
        pack_header(key=-1)
    with raises("integer"):
        pack_header(rows=1.0)
    with raises("64-bit"):
        unpack_header(1 << 64)


def test_wire_constants():
    c = wire_constants()
    c_keywords = {"int", "char", "long", "short", "signed", "unsigned", "const", "static"}
    for name, value in c.items():
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*", name), name
        assert not keyword.iskeyword(name) and name.lower() not in c_keywords
        assert type(value) is int
    assert c["BEAT_BITS"] == BEAT_BITS == 64 and c["BEAT_BYTES"] == BEAT_BYTES == 8
    assert c["STATE_WORDS"] == STATE_WORDS == 4 and c["STATE_WORD_BITS"] == STATE_WORD_BITS
    for f in HEADER_FIELDS:
        assert c[f"HDR_{f.name.upper()}_LSB"] == f.lsb
        assert c[f"HDR_{f.name.upper()}_BITS"] == f.bits
    for k in Kind:
        assert c[f"KIND_{k.name}"] == k.value
        assert c[f"ELEMENT_BITS_{k.name}"] == ELEMENT_BITS[k]
        assert c[f"ELEMENTS_PER_BEAT_{k.name}"] * ELEMENT_BITS[k] == BEAT_BITS
    assert c["DIR_FWD"] == 0 and c["DIR_BWD"] == 1
    # the table covers the beat exactly, without overlap
    spans = sorted((f.lsb, f.lsb + f.bits) for f in HEADER_FIELDS)
    assert spans[0][0] == 0 and spans[-1][1] == BEAT_BITS
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_message_conversion():
    m = msg()
    assert WireMessage.from_message(3, Kind.DATA, m.to_message()) == m
    assert isinstance(m.to_message(), Message)
    assert m != msg(key=43) and m != msg(payload=m.payload + 1)


# --------------------------------------------------------------------------- round trips


@given(streams())
@ROUND
def test_round_trip(stream):
    channels, msgs = stream
    data, last = concat_beats(msgs, channels)
    assert decode_beats(data, last, channels) == msgs
    buf = encode_bytes(msgs, channels)
    assert len(buf) == BEAT_BYTES * len(data)
    assert buf == data.astype("<u8").tobytes()
    back = decode_bytes(buf, channels)
    assert back == msgs
    for m in back:
        assert m.payload.dtype == np.int64 and isinstance(m.kind, Kind)
        assert isinstance(m.direction, Direction) and isinstance(m.tag, Tag)


@given(streams(), st.data())
@settings(max_examples=60, deadline=None)
def test_stream_decoder_matches_decode_bytes(stream, data):
    channels, msgs = stream
    buf = encode_bytes(msgs, channels)
    # byte by byte
    dec = StreamDecoder(channels)
    got: list[WireMessage] = []
    for i in range(len(buf)):
        got += dec.feed(buf[i : i + 1])
        assert dec.pending_bytes < BEAT_BYTES * 2 + len(buf)
    assert dec.pending_bytes == 0
    dec.finish()
    assert got == msgs == decode_bytes(buf, channels)
    # random chunks
    chunks = data.draw(st.lists(st.integers(0, 40), max_size=10))
    assert stream_decode(buf, channels, chunks) == msgs


def test_stream_decoder_partial_and_failure():
    buf = encode_bytes([msg(), msg(key=7)], CHANNELS)
    dec = StreamDecoder(CHANNELS)
    assert dec.feed(buf[:-3]) == [msg()]
    assert dec.pending_bytes == len(buf) // 2 - 3
    with raises("pending"):
        dec.finish()
    assert dec.feed(buf[-3:]) == [msg(key=7)]
    dec.finish()
    # a bad header is reported as soon as its beat is complete, and the decoder stays failed
    dec = StreamDecoder(CHANNELS)
    with raises("unknown channel 9"):
        dec.feed(pack_header(channel=9, rows=1).to_bytes(8, "little"))
    with raises("failed"):
        dec.feed(b"")
    with raises("bytes-like"):
        StreamDecoder(CHANNELS).feed("text")


# --------------------------------------------------------------------------- fuzz


def check_decode(fn, *args) -> None:
    try:
        out = fn(*args)
    except WireError:
        return
    assert isinstance(out, list) and all(isinstance(m, WireMessage) for m in out)


# Every channel id known, so random headers get past the first check more often.
FUZZ_CHANNELS = ChannelMap(
    ChannelSpec(i, f"c{i}", {k: Shape(1 + (i + k) % 7, 1 + i % 3) for k in Kind if (i + k) % 3})
    for i in range(256)
)


@given(st.binary(max_size=400))
@FUZZ
def test_fuzz_random_bytes(buf):
    check_decode(decode_bytes, buf, FUZZ_CHANNELS)
    check_decode(decode_bytes, buf, CHANNELS)
    check_decode(stream_decode, buf, FUZZ_CHANNELS, [3, 5, 8])


@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.booleans()), max_size=40),
)
@FUZZ
def test_fuzz_random_beats(beats):
    data = np.array([d for d, _ in beats], dtype=np.uint64)
    last = np.array([t for _, t in beats], dtype=bool)
    check_decode(decode_beats, data, last, FUZZ_CHANNELS)
    check_decode(decode_beats, data, last, CHANNELS)


@st.composite
def plausible_streams(draw) -> tuple[np.ndarray, np.ndarray]:
    """Headers built from near-valid field values, then random words: reaches the deep checks."""
    words, last = [], []
    for _ in range(draw(st.integers(1, 3))):
        header = pack_header(
            channel=draw(st.sampled_from(sorted(CHANNELS) + [0])),
            direction=draw(st.integers(0, 1)),
            kind=draw(st.integers(0, 7)),
            state_len=draw(st.integers(0, 7)),
            reserved=draw(st.sampled_from([0, 0, 0, 1])),
            rows=draw(st.integers(0, 5)),
            key=draw(st.integers(0, 2**32 - 1)),
        )
        body = draw(
            st.lists(
                st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 0xFFFF])),
                max_size=14,
            )
        )
        words += [header, *body]
        last += [False] * len(body) + [True]
    flips = draw(st.lists(st.integers(0, len(last) - 1), max_size=2))
    for i in flips:
        last[i] = not last[i]
    return np.array(words, dtype=np.uint64), np.array(last, dtype=bool)


@given(plausible_streams())
@FUZZ
def test_fuzz_plausible_streams(stream):
    data, last = stream
    check_decode(decode_beats, data, last, CHANNELS)
    check_decode(decode_bytes, data.astype("<u8").tobytes(), CHANNELS)


@given(
    st.one_of(
        st.none(),
        st.text(max_size=5),
        st.lists(st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.booleans()), max_size=6),
        st.lists(st.lists(st.integers(0, 3), max_size=3), max_size=3),
    ),
    st.one_of(st.none(), st.lists(st.one_of(st.integers(-2, 3), st.booleans()), max_size=6)),
)
@FUZZ
def test_fuzz_odd_beat_inputs(data, last):
    check_decode(decode_beats, data, last, CHANNELS)


@given(streams(), st.data())
@FUZZ
def test_mutation_fuzz(stream, data):
    """Corrupt a valid encoding: decoding gives WireError or messages, never anything else."""
    channels, msgs = stream
    msgs = msgs or [data.draw(wire_messages(channels))]
    beats, last = concat_beats(msgs, channels)
    buf = bytearray(encode_bytes(msgs, channels))
    ends = np.cumsum([len(encode_bytes([m], channels)) for m in msgs]).tolist()
    mutation = data.draw(st.sampled_from(["flip", "truncate", "append", "last"]))
    if mutation == "flip":
        bit = data.draw(st.integers(0, len(buf) * 8 - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
        beats = np.frombuffer(bytes(buf), dtype="<u8").astype(np.uint64)
    elif mutation == "truncate":
        cut = data.draw(st.integers(0, len(buf) - 1))
        del buf[cut:]
        beats, last = beats[: cut // 8], last[: cut // 8]
    elif mutation == "append":
        extra = data.draw(st.binary(min_size=1, max_size=40))
        buf += extra
        words = np.frombuffer(extra[: len(extra) // 8 * 8], dtype="<u8").astype(np.uint64)
        flags = data.draw(st.lists(st.booleans(), min_size=len(words), max_size=len(words)))
        beats = np.concatenate([beats, words])
        last = np.concatenate([last, np.array(flags, dtype=bool)])
    else:
        i = data.draw(st.integers(0, len(last) - 1))
        last = last.copy()
        last[i] = not last[i]
        with raises("TLAST"):  # a flipped TLAST is always an early or a missing one
            decode_beats(beats, last, channels)
    check_decode(decode_beats, beats, last, channels)
    check_decode(decode_bytes, bytes(buf), channels)
    # StreamDecoder fails exactly when decode_bytes does (via feed or finish), else agrees
    try:
        expected = decode_bytes(bytes(buf), channels)
    except WireError:
        with pytest.raises(WireError):
            stream_decode(bytes(buf), channels, [7, 1, 16])
    else:
        assert stream_decode(bytes(buf), channels, [7, 1, 16]) == expected
        if mutation == "truncate":  # only a cut between messages leaves a valid stream
            assert len(buf) in [0, *ends] and expected == msgs[: [0, *ends].index(len(buf))]


# --------------------------------------------------------------------------- channel map


def test_channel_map():
    assert sorted(CHANNELS) == [3, 7, 255] and len(CHANNELS) == 3
    assert CHANNELS.by_name("emb").channel == 7
    assert str(CHANNELS[3]) == "channel 3 ('fc1')"
    with raises("unknown channel 4"):
        CHANNELS.spec(4)
    with raises("duplicate channel id 1"):
        ChannelMap([ChannelSpec(1, "a"), ChannelSpec(1, "b")])
    with raises("duplicate channel name 'a'"):
        ChannelMap([ChannelSpec(1, "a"), ChannelSpec(2, "a")])
    with raises("outside"):
        ChannelSpec(256, "x")
    with raises("outside"):
        ChannelSpec(-1, "x")
    with raises("name"):
        ChannelSpec(1, "")
    with raises("width 0"):
        ChannelSpec(1, "x", {Kind.DATA: Shape(0, 1)})
    with raises("max_rows"):
        ChannelSpec(1, "x", {Kind.DATA: Shape(1, 0)})
    with raises("max_rows"):
        ChannelSpec(1, "x", {Kind.DATA: Shape(1, 1 << 16)})
    with raises("unknown kind"):
        ChannelSpec(1, "x", {9: Shape(1, 1)})
    with raises("ChannelSpec"):
        ChannelMap([(1, "x")])


# --------------------------------------------------------------------------- encode rejects


@pytest.mark.parametrize(
    "bad, match",
    [
        (msg(payload=np.array([[0, 0, 0, 0, 32768]])), "element 32768 does not fit 16-bit"),
        (msg(payload=np.array([[0, 0, -32769, 0, 0]])), "element -32769 does not fit"),
        (
            msg(kind=Kind.GRADS, payload=np.array([[0, 0, 2**63]], dtype=np.uint64)),
            "does not fit 48-bit",
        ),
        (msg(key=-1), "key -1 outside"),
        (msg(key=2**32), "key 4294967296 outside"),
        (msg(state=(1, 65536)), "state word 65536 outside"),
        (msg(state=(-1,)), "state word -1 outside"),
        (msg(state=(0, 0, 0, 0, 0)), "5 state words"),
        (msg(state=(1.5,)), "integer"),
        (msg(rows=0), "rows 0 outside"),
        (msg(rows=5), "rows 5 outside \\[1, 4\\]"),
        (msg(width=6), "width 6 != channel width 5"),
        (msg(channel=4, width=5), "unknown channel 4"),
        (msg(channel=3, kind=Kind.WEIGHTS, width=5), "kind WEIGHTS not allowed"),
        (msg(payload=np.zeros((2, 5))), "not an integer type"),
        (msg(payload=np.zeros((2, 5), dtype=bool)), "not an integer type"),
        (msg(payload=np.zeros(5, dtype=np.int64)), "2-D"),
        (msg(payload=[[0] * 5]), "numpy array"),
        (WireMessage(3, 9, Direction.FWD, Tag(0), np.zeros((1, 5), np.int64)), "unknown kind"),
        (WireMessage(3, Kind.DATA, 2, Tag(0), np.zeros((1, 5), np.int64)), "direction"),
    ],
)
def test_encode_rejects(bad, match):
    with raises(match):
        encode_beats(bad, CHANNELS)
    with raises(match):
        encode_bytes([msg(), bad], CHANNELS)
    if "unknown channel" not in match:
        with raises("channel 3 \\('fc1'\\)"):  # names the channel, id and name
            encode_beats(bad, CHANNELS)


def test_encode_extremes_accepted():
    lo, hi = elem_range(Kind.DATA)
    m = msg(rows=4, key=2**32 - 1, state=(65535,) * 4, payload=np.full((4, 5), lo))
    assert (
        decode_bytes(encode_bytes([m, msg(payload=np.full((1, 5), hi))], CHANNELS), CHANNELS)[0]
        == m
    )
    # unsigned and narrow integer payloads are fine when in range
    m16 = msg(payload=np.full((1, 5), hi, dtype=np.uint16))
    assert decode_bytes(encode_bytes([m16], CHANNELS), CHANNELS)[0].payload.tolist() == [[hi] * 5]


# --------------------------------------------------------------------------- decode rejects


def good() -> tuple[np.ndarray, np.ndarray]:
    return encode_beats(msg(), CHANNELS)  # DATA on fc1: width 5 -> 2 beats a row, 6 beats


def with_header(**fields) -> np.ndarray:
    data, _ = good()
    data = data.copy()
    base = unpack_header(int(data[0]))
    base.update(fields)
    data[0] = pack_header(**base)
    return data


def decode_both(data: np.ndarray, last: np.ndarray | None = None):
    """Decode as beats (with a valid TLAST pattern unless given) and as bytes; both must fail."""
    if last is None:
        last = np.zeros(len(data), bool)
        last[-1] = True
    with pytest.raises(WireError) as e1:
        decode_beats(data, last, CHANNELS)
    with pytest.raises(WireError) as e2:
        decode_bytes(data.astype("<u8").tobytes(), CHANNELS)
    return str(e1.value), str(e2.value)


def test_decode_trailing_bytes():
    buf = encode_bytes([msg()], CHANNELS)
    for extra in range(1, 8):
        with raises(f"{extra} trailing bytes"):
            decode_bytes(buf + b"\0" * extra, CHANNELS)


def test_decode_truncated():
    data, last = good()
    for n in range(1, len(data)):
        with raises("truncated"):
            decode_bytes(data[:n].astype("<u8").tobytes(), CHANNELS)
        with raises("truncated"):
            decode_beats(data[:n], np.zeros(n, bool), CHANNELS)


def test_decode_unknown_channel():
    for msg_ in decode_both(with_header(channel=4)):
        assert "unknown channel 4" in msg_


@pytest.mark.parametrize("kind", sorted(set(range(8)) - set(Kind)))  # the 3-bit field's unused values
def test_decode_unknown_kind(kind):
    for m in decode_both(with_header(kind=kind)):
        assert f"unknown kind value {kind}" in m and "channel 3 ('fc1')" in m


def test_decode_kind_not_allowed():
    for m in decode_both(with_header(kind=Kind.STATS)):
        assert "kind STATS not allowed" in m and "channel 3 ('fc1')" in m


@pytest.mark.parametrize("rows", [0, 5, 65535])
def test_decode_rows_out_of_range(rows):
    for m in decode_both(with_header(rows=rows)):
        assert f"rows {rows} outside [1, 4]" in m


@pytest.mark.parametrize("state_len", [5, 6, 7])
def test_decode_state_len(state_len):
    for m in decode_both(with_header(state_len=state_len)):
        assert f"state_len {state_len} > 4" in m


def test_decode_reserved_bit():
    for m in decode_both(with_header(reserved=1)):
        assert "reserved" in m


def test_decode_state_beyond_len():
    data = with_header(state_len=1)  # state beat holds (1, 2): word 1 is nonzero
    for m in decode_both(data):
        assert "nonzero state words beyond state_len 1" in m
    data[1] = 1
    assert decode_beats(data, [0, 0, 0, 0, 0, 1], CHANNELS)[0].tag == Tag(42, (1,))


def test_decode_nonzero_padding():
    data, last = good()
    data = data.copy()
    data[3] |= np.uint64(1 << 16)  # row 0, element 5 (padding)
    for m in decode_both(data, last):
        assert "nonzero padding" in m
    # GRADS (one element a beat) has no padding; STATS/CTRL neither; WEIGHTS width 8 none
    assert decode_beats(*encode_beats(msg(kind=Kind.GRADS, rows=1), CHANNELS), CHANNELS)


def test_decode_missing_tlast():
    data, last = good()
    with raises("missing TLAST on beat 5"):
        decode_beats(data, np.zeros(len(data), bool), CHANNELS)
    d2, l2 = concat_beats([msg(), msg()], CHANNELS)
    l2[5] = False
    with raises("early TLAST|missing TLAST"):
        decode_beats(d2, l2, CHANNELS)


def test_decode_early_tlast():
    data, last = good()
    for i in range(len(data) - 1):
        flags = last.copy()
        flags[i] = True
        with raises("early TLAST"):
            decode_beats(data, flags, CHANNELS)


def test_decode_length_mismatch():
    data, last = good()
    with raises("6 beats but tlast has 5"):
        decode_beats(data, last[:-1], CHANNELS)


@pytest.mark.parametrize(
    "data, last, match",
    [
        ([-1, 0, 0], [0, 0, 1], "negative"),
        ([1.0, 0.0, 0.0], [0, 0, 1], "dtype"),
        ([[1, 2]], [0], "1-D"),
        ([2**64, 0, 0], [0, 0, 1], "outside"),
        ([1, 2, 3], [0, 0, 2], "tlast"),
        ([1, 2, 3], [0.0, 0.0, 1.0], "tlast"),
        ("abc", [1], "1-D"),
        ([[1], [1, 2]], [0, 1], "not an array|1-D"),
    ],
)
def test_decode_odd_inputs(data, last, match):
    with raises(match):
        decode_beats(data, last, CHANNELS)


def test_decode_odd_buffers():
    with raises("bytes-like"):
        decode_bytes("abc", CHANNELS)
    with raises("bytes-like"):
        decode_bytes(None, CHANNELS)
    assert decode_bytes(b"", CHANNELS) == []
    assert decode_beats([], [], CHANNELS) == []
    # any bytes-like object works, including a multi-byte memoryview
    buf = encode_bytes([msg()], CHANNELS)
    arr = np.frombuffer(buf, dtype="<u8")
    assert decode_bytes(memoryview(arr), CHANNELS) == [msg()]
    assert decode_bytes(bytearray(buf), CHANNELS) == [msg()]
    assert decode_bytes(memoryview(b"x" + buf)[1:], CHANNELS) == [msg()]  # unaligned
    # Python ints beyond int64 as tdata
    data, last = good()
    assert decode_beats([int(x) for x in data], last.tolist(), CHANNELS) == [msg()]


def test_grads_values_are_limited_to_the_48_bit_accumulator():
    """GRADS ride in 64-bit lanes but carry 48-bit accumulators: wider values are malformed."""
    chans = ChannelMap([ChannelSpec(1, "fc", {Kind.GRADS: Shape(2, 1)})])
    ok = WireMessage(1, Kind.GRADS, Direction.BWD, Tag(0, ()), np.array([[-(1 << 47), (1 << 47) - 1]]))
    assert decode_bytes(encode_bytes([ok], chans), chans) == [ok]
    bad = WireMessage(1, Kind.GRADS, Direction.BWD, Tag(0, ()), np.array([[1 << 47, 0]]))
    with pytest.raises(WireError, match="48"):
        encode_bytes([bad], chans)
    words = bytearray(encode_bytes([ok], chans))
    words[16:24] = (1 << 47).to_bytes(8, "little")
    with pytest.raises(WireError, match="48-bit"):
        decode_bytes(bytes(words), chans)
