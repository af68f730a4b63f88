"""Cycle model of the phi kernel (``templates/rtl/kernels/phi.sv.j2``): the pass-through skeleton
of isu (``cycles.isu``); the tag-cache look-up is combinational and the entry is written (or
freed) in the cycle the header goes out, so every port costs the same while the cache has room."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import EdgeSpec, Node
from .isu import pass_through_cycles


def message_cycles(
    node: Node, in_specs: Sequence[EdgeSpec], out_specs: Sequence[EdgeSpec], options: object, port: str, rows: int
) -> int:
    """Cycles from accepting one ``rows``-row message on ``port`` to accepting the next."""
    return pass_through_cycles(node, in_specs, port, rows)
