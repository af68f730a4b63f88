"""Cycle model of the ungroup RTL kernel (templates/rtl/kernels/ungroup.sv.j2).

Every message costs four cycles before its payload moves: one to pick the input, one each for the
header and state beats, one to look its tag up; then one beat a cycle. Forward (``in0``, n rows):
n single-row messages go out, each a header, a state and its row's beats. Backward: n single-row
gradients come in (``out0_grad``, one row each: looked up and stored), and the last of them sends
the gathered n-row gradient. A row gradient cannot know n, so each is charged its own row of that
gathered payload, and the gathered message's header and state are charged to the forward, which
happens once per instance too: per message approximate, per instance exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..design import DeviceOptions
from ..errors import AmpHlsError
from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row

LOOKUP = 4  # select input, header beat, state beat, tag look-up
HEADER = 2  # header and state beats of a message sent


def message_cycles(node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec],
                   options: DeviceOptions, port: str, rows: int) -> int:
    bpr = beats_per_row(Kind.DATA, in_specs[0].width, node_lanes(node))
    if port == "in0":
        return LOOKUP + rows * (HEADER + bpr) + HEADER
    if port == "out0_grad":
        if rows != 1:
            raise AmpHlsError(f"ungroup '{node.name}' takes single-row gradients, not {rows} rows")
        return LOOKUP + 2 * bpr
    raise AmpHlsError(f"ungroup '{node.name}' reads no messages on port {port!r}")
