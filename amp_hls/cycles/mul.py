"""Cycle model of the mul kernel (``templates/rtl/kernels/mul.sv.j2``).

mul is add's join skeleton with another combine (the product lanes are combinational, one output
beat a cycle) and a backward that computes every input's gradient beat from one ``dy`` beat at
once: its timing is add's (see ``amp_hls.cycles.add``).
"""

from __future__ import annotations

from .add import WHOLE_JOIN_PER_PORT, message_cycles

__all__ = ["WHOLE_JOIN_PER_PORT", "message_cycles"]
