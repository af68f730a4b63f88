"""The declared maxima every graph must respect; the wire format and the hardware rely on them."""

from __future__ import annotations

from dataclasses import dataclass

from ..message import MAX_STATE_WORDS


@dataclass(frozen=True)
class Limits:
    max_width: int = 4096  # columns of any edge (and Linear fan-in: far below the 48-bit bound)
    max_rows: int = (1 << 16) - 1  # the wire header's rows field is 16 bits
    max_arity: int = 16  # inputs of a join / outputs of a broadcast or split
    max_nodes: int = 250  # channel ids are 8 bits; leave room for the boundary's own
    max_state_words: int = MAX_STATE_WORDS


LIMITS = Limits()
