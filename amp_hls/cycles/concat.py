"""Cycle model of the concat kernel (``templates/rtl/kernels/concat.sv.j2``).

Parts arrive as in every join (``amp_hls.cycles.add``: ``PART_CYCLES`` plus one cycle per stored
beat). Where every part starts on a beat (``parts_on_beats``) the joined message's beats go out
one a cycle straight from the part memories; otherwise it is assembled row by row in a row
buffer: every part's beats of the row are loaded one a cycle, then the row's output beats go out
one a cycle. The backward takes each gradient row into the buffer (one cycle a beat) and sends
every input its slice at once, one beat a cycle for as many beats as the widest input has per row.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row, parts_on_beats
from .add import EMIT_CYCLES, PART_CYCLES, WHOLE_JOIN_PER_PORT, join_ports

__all__ = ["WHOLE_JOIN_PER_PORT", "message_cycles"]


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    part_beats = [beats_per_row(Kind.DATA, s.width, node_lanes(node)) for s in in_specs]
    out_beats = beats_per_row(Kind.DATA, out_specs[0].width, node_lanes(node))
    if join_ports(node, port, rows):
        stored = len(in_specs) * PART_CYCLES + rows * sum(part_beats)
        loaded = 0 if parts_on_beats([s.width for s in in_specs], node_lanes(node)) else sum(part_beats)
        return stored + EMIT_CYCLES + rows * (loaded + out_beats)
    return PART_CYCLES + EMIT_CYCLES + rows * (out_beats + max(part_beats))
