"""Cycle model of the group RTL kernel (templates/rtl/kernels/group.sv.j2).

Every message costs four cycles before its payload moves: one to pick the input, one each for the
header and state beats, one to look its tag up; then one beat a cycle. Forward: n single-row
messages come in (``in0``, one row each: looked up and stored), and the last of them sends the
gathered n-row message. A row cannot know n, so each is charged its own row of that gathered
payload, and the gathered message's header and state are charged to the backward, which happens
once per instance too: per message approximate, per instance exact. Backward (``out0_grad``, n
rows): n single-row gradients go out, each a header, a state and its row's beats.
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
        if rows != 1:
            raise AmpHlsError(f"group '{node.name}' takes single-row messages, not {rows} rows")
        return LOOKUP + 2 * bpr
    if port == "out0_grad":
        return LOOKUP + rows * (HEADER + bpr) + HEADER
    raise AmpHlsError(f"group '{node.name}' reads no messages on port {port!r}")
