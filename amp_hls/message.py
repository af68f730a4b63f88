"""Messages: the unit of work every executor passes between nodes (docs/contracts.md, IR).

A message is ``(tag, direction, payload)``. The tag is ``(key, state)``: ``key`` names the
instance, ``state`` is a short tuple of small unsigned integers (loop counter, tree position,
row index ...) that control-flow nodes read and update. ``payload`` is a 2-D array
``rows x width``: float in float mode, int64 holding fixed-point integers in fixed mode.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import numpy as np

MAX_STATE_WORDS = 4  # the wire carries four 16-bit state words (docs/contracts.md, Wire format)
MAX_STATE_VALUE = (1 << 16) - 1
STATE_SPACE = f"{MAX_STATE_WORDS} x {MAX_STATE_VALUE.bit_length()}-bit state"  # how errors name it
MAX_KEY = (1 << 32) - 1


class Direction(IntEnum):
    FWD = 0  # activations
    BWD = 1  # gradients w.r.t. the forward payload of the same tag


class Tag(NamedTuple):
    """Identifies one message's place in one instance; hashable, so caches key on it."""

    key: int
    state: tuple[int, ...] = ()

    def with_state(self, state: tuple[int, ...]) -> Tag:
        return Tag(self.key, state)

    def __str__(self) -> str:
        return f"{self.key}{list(self.state)}"


class Message(NamedTuple):
    tag: Tag
    direction: Direction
    payload: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.payload.shape[0])

    @property
    def width(self) -> int:
        return int(self.payload.shape[1])


def fwd(tag: Tag, payload: np.ndarray) -> Message:
    return Message(tag, Direction.FWD, payload)


def bwd(tag: Tag, payload: np.ndarray) -> Message:
    return Message(tag, Direction.BWD, payload)
