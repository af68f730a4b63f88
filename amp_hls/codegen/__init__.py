"""Code generation: IR and the Python definitions -> C++ (HLS) and SystemVerilog sources."""

from .headers import render_numerics_header, render_wire_header
from .jinja import environment

__all__ = ["environment", "render_numerics_header", "render_wire_header"]
