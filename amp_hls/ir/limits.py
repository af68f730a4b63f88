"""The declared maxima every graph and device must respect; the wire format and the hardware rely on
them. Each is defined here once and quoted in the message that enforces it."""

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
    max_parallelism: int = 256  # MACs of one Linear kernel: 4 rows of 64 lanes (Linear.outputs_per_step)
    max_lanes: int = 8  # 64-bit beats side by side on a row-wise kernel's streams (wire.py, Lanes)
    max_muf: int = (1 << 16) - 1  # backward messages between GRADS dumps of a device kernel
    max_cache_slots: int = 4096  # tag-table entries of a caching device kernel (its RAMs scale with it)

    @property
    def max_edges(self) -> int:
        """Each input port takes one edge: at most ``max_arity`` per node."""
        return self.max_nodes * self.max_arity


LIMITS = Limits()
