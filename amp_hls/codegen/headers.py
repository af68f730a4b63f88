"""C++ headers generated from the Python definitions of the wire format and the numeric rules.

Nothing in these headers is typed by hand: constants come from ``amp_hls.wire.wire_constants``
and ``amp_hls.numerics``; the lookup tables are the very tables the numpy kernels use.
"""

from __future__ import annotations

from ..numerics import ACC_BITS, LUT_KINDS, NumericConfig, activation_table
from ..wire import wire_constants
from .jinja import environment


def render_wire_header() -> str:
    return environment().get_template("hls/amp_wire.h.j2").render(constants=wire_constants())


def render_numerics_header(numerics: NumericConfig) -> str:
    precisions = {"DATA": numerics.data, "WEIGHTS": numerics.weights, "GRADS": numerics.grads}
    tables = [activation_table(kind, numerics.data) for kind in LUT_KINDS]
    return environment().get_template("hls/amp_numerics.h.j2").render(
        acc_bits=ACC_BITS,
        precisions=precisions,
        grad_acc_frac=numerics.grad_acc_frac,
        tables=tables,
    )
