"""Cycle model of the rowsum kernel (``templates/rtl/kernels/rowsum.sv.j2``).

Like the activation kernel, a message takes ``CONTROL_CYCLES`` (``S_IDLE``, the header and state
beats, ``S_LOOK``, the output header and state beats) plus one cycle per payload beat: the
forward reads its ``rows`` rows (the sum goes out with the last row's beats); the backward reads
one gradient row and sends it once per row of the forward message it answers. For ``out0_grad``,
``rows`` is therefore that forward's row count (the gradient itself always has one row).
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
    """Cycles from accepting one message on ``port`` (of, or answering, ``rows`` rows) to the next."""
    check_port(node, port, rows)
    return CONTROL_CYCLES + rows * beats_per_row(Kind.DATA, in_specs[0].width, node_lanes(node))
