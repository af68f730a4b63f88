"""``encode_many`` / ``decode_many`` (the PYNQ driver's batched codec) are ``encode_bytes`` /
``decode_bytes``: the same bytes, the same messages, the same errors, on random traffic (several
channels and kinds, rows, tag states, extreme values) and on every kind of fault."""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.errors import WireError
from amp_hls.message import Direction, Tag
from amp_hls.wire import (
    ChannelMap,
    ChannelSpec,
    Kind,
    Shape,
    WireMessage,
    decode_bytes,
    decode_many,
    encode_bytes,
    encode_many,
    pack_header,
)

CHANNELS = ChannelMap([
    ChannelSpec(0, "data", {Kind.DATA: Shape(10, 3)}),
    ChannelSpec(1, "odd", {Kind.DATA: Shape(5, 4)}),
    ChannelSpec(2, "params", {Kind.WEIGHTS: Shape(7, 2), Kind.GRADS: Shape(7, 2)}),
])


def _traffic(seed: int, n: int = 400) -> list[WireMessage]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        pick = int(rng.integers(0, 4))
        state = tuple(int(x) for x in rng.integers(0, 65536, int(rng.integers(0, 5))))
        key = int(rng.integers(0, 2**32))
        if pick == 0:
            out.append(WireMessage(0, Kind.DATA, Direction(i % 2), Tag(key, state),
                                   rng.integers(-2**15, 2**15, (int(rng.integers(1, 4)), 10))))
        elif pick == 1:
            out.append(WireMessage(1, Kind.DATA, Direction.FWD, Tag(key, state), rng.integers(-2**15, 2**15, (4, 5))))
        elif pick == 2:
            out.append(WireMessage(2, Kind.WEIGHTS, Direction.FWD, Tag(key, ()), rng.integers(-2**15, 2**15, (2, 7))))
        else:
            out.append(WireMessage(2, Kind.GRADS, Direction.BWD, Tag(key, state[:1]),
                                   rng.integers(-2**47, 2**47, (int(rng.integers(1, 3)), 7))))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_the_batched_codec_is_the_reference_one(seed):
    msgs = _traffic(seed)
    raw = encode_bytes(msgs, CHANNELS)
    assert encode_many(msgs, CHANNELS) == raw
    assert decode_many(raw, CHANNELS) == decode_bytes(raw, CHANNELS) == msgs
    assert encode_many(msgs[:2], CHANNELS) == encode_bytes(msgs[:2], CHANNELS)  # small batches too
    assert decode_many(b"", CHANNELS) == []


@pytest.mark.parametrize("fault, message", [
    (lambda m: WireMessage(9, m.kind, m.direction, m.tag, m.payload), "unknown channel 9"),
    (lambda m: WireMessage(m.channel, m.kind, m.direction, Tag(2**32, ()), m.payload), "key"),
    (lambda m: WireMessage(m.channel, m.kind, m.direction, Tag(1, (70000,)), m.payload), "state word 70000"),
    (lambda m: WireMessage(m.channel, m.kind, m.direction, m.tag, m.payload * 0 + 2**15), "does not fit 16-bit"),
    (lambda m: WireMessage(m.channel, m.kind, m.direction, m.tag, m.payload[:, :3]), "width 3"),
    (lambda m: WireMessage(m.channel, Kind.GRADS, m.direction, m.tag, m.payload), "not allowed"),
])
def test_an_encoding_fault_is_the_reference_error(fault, message):
    msgs = _traffic(7, 40)
    i = next(j for j, m in enumerate(msgs) if m.channel == 0)
    msgs[i] = fault(msgs[i])
    with pytest.raises(WireError, match=message) as reference:
        encode_bytes(msgs, CHANNELS)
    with pytest.raises(WireError) as batched:
        encode_many(msgs, CHANNELS)
    assert str(batched.value) == str(reference.value)


def test_a_decoding_fault_is_the_reference_error():
    msgs = _traffic(3, 40)
    raw = bytearray(encode_bytes(msgs, CHANNELS))
    cases = {
        "truncated": bytes(raw[:-8]),
        "trailing bytes": bytes(raw) + b"\x00" * 3,
        "unknown channel": pack_header(channel=7, kind=0, rows=1, key=1).to_bytes(8, "little") + bytes(raw),
        "reserved": bytes(raw[:1]) + bytes([raw[1] | 0x80]) + bytes(raw[2:]),
        "padding": None,
    }
    one = encode_bytes([WireMessage(1, Kind.DATA, Direction.FWD, Tag(1, ()), np.zeros((4, 5), np.int64))], CHANNELS)
    cases["padding"] = one[:16 + 8] + (1 << 16).to_bytes(8, "little")[:8] + one[32:]
    cases["state beyond state_len"] = one[:8] + (5).to_bytes(8, "little") + one[16:]
    for name, data in cases.items():
        with pytest.raises(WireError) as reference:
            decode_bytes(data, CHANNELS)
        with pytest.raises(WireError) as batched:
            decode_many(data, CHANNELS)
        assert str(batched.value) == str(reference.value), name
