"""Cycle model of the rowsum kernel (``templates/rtl/kernels/rowsum.sv.j2``).

Like the activation kernel, a message takes ``CONTROL_CYCLES`` (``S_IDLE``, the header and state
beats, ``S_LOOK``, the output header and state beats) plus one cycle per payload beat: the
forward reads its ``rows`` rows (the sum goes out with the last row's beats); the backward reads
one gradient row and sends it once per row of the forward message it answers. For ``out0_grad``,
``rows`` is therefore that forward's row count (the gradient itself always has one row).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import AmpHlsError
from ..ir import EdgeSpec, Node
from ..wire import Kind, beats_per_row

CONTROL_CYCLES = 6  # S_IDLE, S_HDR, S_STATE, S_LOOK, S_OHDR, S_OSTATE
PORTS = ("in0", "out0_grad")


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one message on ``port`` (of, or answering, ``rows`` rows) to the next."""
    if port not in PORTS:
        raise AmpHlsError(f"rowsum node '{node.name}' has no input port {port!r} (it reads {PORTS})")
    if rows < 1:
        raise AmpHlsError(f"rowsum node '{node.name}': a message has at least one row, not {rows}")
    return CONTROL_CYCLES + rows * beats_per_row(Kind.DATA, in_specs[0].width)
