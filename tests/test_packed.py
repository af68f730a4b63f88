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


def test_a_join_takes_packed_and_plain_batches_alike():
    owner = type("Owner", (), {"error": lambda self, m: KernelError(m)})()
    join = JoinBuffer(owner, 2)  # type: ignore[arg-type]
    p = _packed([1, 2, 3], [1, 1, 2])
    assert join.add(0, p) == []
    done = join.add(1, [fwd(Tag(2, (2,)), np.ones((1, 2))), fwd(Tag(3, (0,)), np.ones((2, 2)))])
    assert [tag for tag, _ in done] == [Tag(2, (2,)), Tag(3, (0,))]
    np.testing.assert_array_equal(done[1][1][0], p.rows[2:4])
    np.testing.assert_array_equal(done[1][1][1], np.ones((2, 2)))
    assert len(join) == 1
    with pytest.raises(KernelError, match="second message"):
        join.add(0, _packed([1, 5], [1, 1]))
