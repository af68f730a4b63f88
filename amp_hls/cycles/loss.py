"""Cycle model of the loss kernel (``templates/rtl/kernels/loss.sv.j2``).

Each part (prediction on ``in0``, target on ``in1``) takes ``PART_CYCLES`` (pick, header, state,
tag lookup) plus one cycle per payload beat stored. The evaluation follows the part that
completes a tag; it is charged to the prediction, which comes once per judged message (the
per-message total is exact, the split between the ports approximate). It sends the target's
zero gradient (header, state, one cycle a beat), the gradient's header and state, then reads
every element from its RAM a cycle before using it (two cycles an element, a pass): mse one pass
a row; softmax_ce first checks each row's label (two cycles a row), then per row a max pass, a
sum pass, the divider (``RECIP_SHIFT + 1`` cycles), the row's loss (one) and the gradient pass.
The LOSS report is a header, a state beat and ``LOSS_WIDTH`` words. A kernel whose target
comes from a host source (``design.skips_dx``: ``skip_dx``) sends no zero gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Loss, Node
from ..numerics import RECIP_SHIFT
from ..wire import LOSS_WIDTH, Kind, beats_per_row
from . import check_port

PART_CYCLES = 4  # S_IDLE, S_HDR, S_STATE, S_LOOK
HEADER_CYCLES = 2  # a header and a state beat
ELEMENT_CYCLES = 2  # S_RD, S_USE


def evaluation_cycles(fn: str, width: int, target_width: int, rows: int, skip_dx: bool = False) -> int:
    """Cycles from a tag's completion to the last word of its LOSS report."""
    zeros = 0 if skip_dx else HEADER_CYCLES + rows * beats_per_row(Kind.DATA, target_width)
    report = HEADER_CYCLES + LOSS_WIDTH
    if fn == "mse":
        per_row = ELEMENT_CYCLES * width
        check = 0
    else:
        per_row = 3 * ELEMENT_CYCLES * width + RECIP_SHIFT + 1 + 1
        check = ELEMENT_CYCLES * rows
    return check + zeros + HEADER_CYCLES + rows * per_row + report


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int,
    skip_dx: bool = False,
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    check_port(node, port, rows)
    assert isinstance(node, Loss)
    index = int(port.removeprefix("in"))
    part = PART_CYCLES + rows * beats_per_row(Kind.DATA, in_specs[index].width)
    if index == 1:
        return part
    return part + evaluation_cycles(node.fn, in_specs[0].width, in_specs[1].width, rows, skip_dx)
