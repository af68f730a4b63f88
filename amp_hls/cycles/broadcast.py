"""Cycle model of the broadcast kernel: the split kernel's template with every output a copy
(``templates/rtl/kernels/broadcast.sv.j2`` includes ``split.sv.j2``; model in ``cycles.split``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node
from .split import join_cycles


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    return join_cycles(node, in_specs, out_specs, port, rows)
