"""Cycle model of the add kernel (``templates/rtl/kernels/add.sv.j2``), and the join skeleton's
costs that the mul and concat models share.

The join kernel serves one message at a time. A forward part takes ``PART_CYCLES`` (``S_IDLE``
to pick the port, the header and state beats, ``S_LOOK`` for the tag) plus one cycle per payload
beat stored. The part that completes a tag is followed by the joined message: its header and
state beat (``EMIT_CYCLES``), then its payload. Ports are served round robin, so with every input
busy one part of each arrives per joined message: the interval between two messages accepted on
any one input is a whole join. A gradient takes ``PART_CYCLES`` plus the gradient header and state
beat, then one beat in and out (to every input at once) per cycle. The parts are RAMs read a
cycle ahead of the beat that uses them (addressed as the state beat or the beat before goes
out), so they add no cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row
from . import check_port

WHOLE_JOIN_PER_PORT = True  # a forward port's cycles are the whole join (cycles.busy_cycles)
PART_CYCLES = 4  # S_IDLE, S_HDR, S_STATE, S_LOOK
EMIT_CYCLES = 2  # S_OHDR, S_OSTATE (forward) or S_GHDR, S_GSTATE (backward)


def join_ports(node: Node, port: str, rows: int) -> bool:
    """Whether ``port`` is a forward input (else the gradient input); AmpHlsError for a port the
    node lacks or a row count below one."""
    check_port(node, port, rows)
    return port != "out0_grad"


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    beats = rows * beats_per_row(Kind.DATA, out_specs[0].width, node_lanes(node))
    if join_ports(node, port, rows):
        return len(in_specs) * (PART_CYCLES + beats) + EMIT_CYCLES + beats
    return PART_CYCLES + EMIT_CYCLES + beats
