"""Cycle model of the isu kernel (``templates/rtl/kernels/isu.sv.j2``) and of the pass-through
skeleton it shares with cond and phi.

The kernel serves one message at a time: a cycle in ``S_IDLE`` to pick the stream, one each to
take the header and the state beat, one each to send the new header (the tag update, the
predicate or the cache look-up is combinational) and the state beat, then one payload beat in
and out per cycle. Every port takes the same path.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node
from ..wire import Kind, beats_per_row
from . import check_port

CONTROL_CYCLES = 5  # S_IDLE, S_HDR, S_STATE, S_OHDR, S_OSTATE


def pass_through_cycles(node: Node, in_specs: Sequence[EdgeSpec], port: str, rows: int) -> int:
    """Cycles per message of a kernel that passes the payload through beat by beat."""
    check_port(node, port, rows)
    return CONTROL_CYCLES + rows * beats_per_row(Kind.DATA, in_specs[0].width)


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    return pass_through_cycles(node, in_specs, port, rows)
