"""Cycle model of the activation kernel (``templates/rtl/kernels/activation.sv.j2``).

The kernel serves one message at a time through its state machine: a cycle in ``S_IDLE`` to pick
the port, one each to take the header and the state beat, one to look the tag up in the cache,
one each to send the output header and state beat, then one payload beat in and out per cycle.
Forward (``in0``) and backward (``out0_grad``) messages take the same path, so the interval
between accepting two back-to-back messages is ``CONTROL_CYCLES`` plus the payload beats.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row
from . import check_port

CONTROL_CYCLES = 6  # S_IDLE, S_HDR, S_STATE, S_LOOK, S_OHDR, S_OSTATE


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    check_port(node, port, rows)
    return CONTROL_CYCLES + rows * beats_per_row(Kind.DATA, in_specs[0].width, node_lanes(node))
