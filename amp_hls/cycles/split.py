"""Cycle model of the split kernel (``templates/rtl/kernels/split.sv.j2``), which broadcast shares.

Forward (``in0``): a cycle in ``S_IDLE``, one each for the header and state beats, one to check
them, one per payload beat read into the buffer, then per output a header, a state beat and its
own payload beats (``rows x`` its beats per row). Backward (``out<j>_grad``): the same four
control cycles and one per beat read into the join entry; the part that completes a tag then
writes in0_grad (header, state and the input's beats per row). Which part completes a tag depends
on arrival order, so each port is charged an equal share of that write: summed over the ports,
the model gives the cycles of one whole tag. The buffer and the parts are RAMs read a cycle
ahead (the first beat's address goes out with the state beat, each next one with a beat), so
they add no cycle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row
from . import check_port

CONTROL_CYCLES = 4  # S_IDLE, S_HDR, S_STATE, S_LOOK
WRITE_CYCLES = 2  # S_OHDR, S_OSTATE of each message written


def join_cycles(node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], port: str, rows: int) -> int:
    """Cycles per message of a kernel that buffers its input and writes it to each output."""
    check_port(node, port, rows)
    beats_in = rows * beats_per_row(Kind.DATA, in_specs[0].width, node_lanes(node))
    beats_out = [rows * beats_per_row(Kind.DATA, s.width, node_lanes(node)) for s in out_specs]
    if port == "in0":
        return CONTROL_CYCLES + beats_in + sum(WRITE_CYCLES + b for b in beats_out)
    j = int(port.removeprefix("out").removesuffix("_grad"))
    return round(CONTROL_CYCLES + beats_out[j] + (WRITE_CYCLES + beats_in) / len(out_specs))


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    return join_cycles(node, in_specs, out_specs, port, rows)
