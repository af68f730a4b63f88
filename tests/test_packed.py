"""Packed batches (``kernels.base.Packed``): they read as the messages they stand for, merge and
cut without changing a row, and joins take them like any batch."""

from __future__ import annotations

import numpy as np
import pytest

from amp_hls.errors import KernelError
from amp_hls.kernels import JoinBuffer
from amp_hls.kernels.base import Packed, merge, stack_rows, tags_of
from amp_hls.message import Direction, Message, Tag, fwd

FWD = Direction.FWD


def _packed(keys: list[int], rows: list[int], start: float = 0.0) -> Packed:
    offsets = [0, *np.cumsum(rows).tolist()]
    data = start + np.arange(offsets[-1] * 2, dtype=float).reshape(-1, 2)
    return Packed([Tag(k, (k % 3,)) for k in keys], FWD, data, offsets)


def test_a_packed_batch_reads_as_its_messages():
    p = _packed([1, 2, 3], [1, 3, 2])
    msgs = list(p)
    assert len(p) == 3 and all(type(m) is Message for m in msgs)
    assert [m.tag for m in msgs] == tags_of(p) == p.tags
    assert [m.rows for m in msgs] == [1, 3, 2]
    np.testing.assert_array_equal(np.concatenate([m.payload for m in msgs]), p.rows)
    np.testing.assert_array_equal(p[1].payload, p.rows[1:4])
    rows, offsets = stack_rows(p)
    assert rows is p.rows and offsets == p.offsets  # no copy


def test_cutting_a_packed_batch():
    p = _packed([1, 2, 3, 4], [2, 1, 1, 3])
    head, tail = p.part(0, 3), p.part(3, 4)
    assert type(head) is Packed and type(tail) is list  # a lone message travels as itself
    assert [m.tag for m in [*head, *tail]] == p.tags
    np.testing.assert_array_equal(np.concatenate([m.payload for m in [*head, *tail]]), p.rows)
    assert head.offsets == [0, 2, 3, 4]


def test_merging_messages_and_packed_batches_keeps_arrival_order():
    a = _packed([1, 2], [1, 2])
    lone = fwd(Tag(9, (0,)), np.full((2, 2), -1.0))
    b = _packed([3, 4], [2, 1], start=100.0)
    merged = merge([a, lone, b], FWD)
    expected = [*a, lone, *b]
    assert [m.tag for m in merged] == [m.tag for m in expected]
    for got, want in zip(merged, expected):
        np.testing.assert_array_equal(got.payload, want.payload)
    plain = [lone, fwd(Tag(8, ()), np.zeros((1, 2)))]
    assert merge(plain, FWD) is plain  # messages only: nothing to stack
    assert merge([a], FWD) is a


def _join(arity: int = 2) -> JoinBuffer:
    owner = type("Owner", (), {"error": lambda self, m: KernelError(m)})()
    return JoinBuffer(owner, arity)  # type: ignore[arg-type]


def test_a_join_takes_packed_and_plain_batches_alike():
    join = _join()
    p = _packed([1, 2, 3], [1, 1, 2])
    assert join.add(0, p) is None and len(join) == 3
    done = join.add(1, [fwd(Tag(2, (2,)), np.ones((1, 2))), fwd(Tag(3, (0,)), np.ones((2, 2)))])
    assert done.tags == [Tag(2, (2,)), Tag(3, (0,))]
    np.testing.assert_array_equal(done.parts[0], p.rows[1:4])
    np.testing.assert_array_equal(done.parts[1], np.ones((3, 2)))
    assert done.offsets == [[0, 1, 3], [0, 1, 3]]
    assert len(join) == 1
    with pytest.raises(KernelError, match="second message"):
        join.add(0, _packed([1, 5], [1, 1]))


def test_batches_with_equal_tags_complete_whole_without_copies():
    join = _join(3)
    a, b, c = _packed([4, 5, 6], [2, 1, 1]), _packed([4, 5, 6], [2, 1, 1], 50.0), _packed([4, 5, 6], [2, 1, 1], 90.0)
    assert join.add(2, c) is None and join.add(0, a) is None and len(join) == 3
    done = join.add(1, b)
    assert done.tags == a.tags and len(join) == 0
    assert done.parts[0] is a.rows and done.parts[1] is b.rows and done.parts[2] is c.rows


def test_a_batch_that_does_not_match_falls_back_to_tag_by_tag():
    """Same completions and rows as if every message had come alone, in the same order."""
    first = _packed([1, 2, 3], [1, 2, 1])
    second = _packed([3, 1, 2], [1, 1, 2], 100.0)
    whole, single = _join(), _join()
    assert whole.add(0, first) is None
    done = whole.add(1, second)
    assert single.add(0, list(first)) is None
    expected = single.add(1, list(second))
    assert done.tags == expected.tags == [Tag(3, (0,)), Tag(1, (1,)), Tag(2, (2,))]
    for got, want in zip(done.parts, expected.parts):
        np.testing.assert_array_equal(got, want)
    assert done.offsets == expected.offsets
