"""Cycle model of the aggregate RTL kernel (templates/rtl/kernels/aggregate.sv.j2).

Every message costs four cycles before its payload moves: one to pick the input, one each for the
header and state beats, one to look its tag up; then it is stored, one beat a cycle. A scatter
takes one cycle per beat of each edge's row, and ``SCATTER_DRAIN`` more to empty its pipeline
(the edge, then the term and sum, are read from synchronous memories); the sums leave one beat a
cycle after a header and a state. Forward: node states (``in0``, n rows) and edges (``in1``, e
rows) are stored, scattered over the e edges, and the n sums sent. Backward (``out0_grad``, n
rows): the gradient is stored, scattered back over the edges, then dx and the edges' zero gradient
(e rows) are sent. The gradient does not carry e, so the backward's work per edge (its scatter
and its zero row) is charged to the edges' message, which comes once per instance too: per message
approximate, per instance exact.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..design import DeviceOptions
from ..errors import AmpHlsError
from ..ir import EdgeSpec, Node, node_lanes
from ..wire import Kind, beats_per_row

LOOKUP = 4  # select input, header beat, state beat, tag look-up
HEADER = 2  # header and state beats of a message sent
SCATTER_DRAIN = 2  # S_SWAIT: the last edge beat's term read, then its sum written


def message_cycles(node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec],
                   options: DeviceOptions, port: str, rows: int) -> int:
    bpr = beats_per_row(Kind.DATA, in_specs[0].width, node_lanes(node))
    if port == "in0":  # x stored, y sent
        return LOOKUP + 2 * rows * bpr + HEADER
    if port == "in1":  # edges stored and scattered; backward: scattered again, zero rows sent
        return LOOKUP + rows + 2 * (rows * bpr + SCATTER_DRAIN) + rows
    if port == "out0_grad":  # dy stored, dx sent, then the zero gradient's header and state
        return LOOKUP + 2 * rows * bpr + HEADER + HEADER
    raise AmpHlsError(f"aggregate '{node.name}' reads no messages on port {port!r}")
