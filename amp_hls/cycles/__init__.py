"""Cycle model: how many clock cycles each RTL kernel spends per message.

One module per device node kind, ``amp_hls/cycles/<kind>.py`` (named by the kind's row in
``amp_hls.kinds``, next to its RTL template ``templates/rtl/kernels/<kind>.sv.j2``), defines::

    def message_cycles(node, in_specs, out_specs, options, port: str, rows: int) -> int

the kernel's initiation interval for messages of ``rows`` rows arriving on ``port`` (``in0``,
``out0_grad``, ``params``, ...): in steady state with no back-pressure, the cycles between
accepting one such message and accepting the next. A kind whose kernel can leave out its input
gradient (``design.skips_dx``: Linear, Loss) takes ``skip_dx: bool = False`` as well; it is
passed only when the design says so. Tests hold each formula within 15% of cycles
measured on the RTL under Verilator. A join kind whose forward ports are each priced as the whole
join (every input busy, one part of each arrives per joined message) says so with
``WHOLE_JOIN_PER_PORT = True``: its busy time counts one such port (``busy_cycles``).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import AmpHlsError
from ..ir import GraphCore, Node
from ..kinds import cycle_model


def message_cycles(graph: GraphCore, name: str, options, port: str, rows: int,  # noqa: ANN001
                   skip_dx: bool = False) -> int:
    """Expected cycles node ``name`` spends on one message of ``rows`` rows on ``port``
    (``skip_dx``: its kernel leaves out the input gradient, ``NodeDesign.skip_dx``)."""
    node = graph.nodes[name]
    in_specs = [graph.input_spec(name, i) for i in range(node.n_inputs)]
    out_specs = [graph.spec(name, j) for j in range(node.n_outputs)]
    flag = {"skip_dx": True} if skip_dx else {}
    return int(cycle_model(node.kind).message_cycles(node, in_specs, out_specs, options, port, rows, **flag))


def busy_cycles(kind: str, per_port: Mapping[str, float]) -> float:
    """A kernel's busy cycles from each port's (messages x cycles): the ports add up, except a
    join's forward ports (``WHOLE_JOIN_PER_PORT``), each of which carries one part of every joined
    message priced as the whole join, so that one port's worth is the kernel's forward work."""
    if not getattr(cycle_model(kind), "WHOLE_JOIN_PER_PORT", False):
        return sum(per_port.values())
    forward = [c for p, c in per_port.items() if not p.endswith("_grad")]
    return max(forward, default=0.0) + sum(c for p, c in per_port.items() if p.endswith("_grad"))


def input_ports(node: Node) -> tuple[str, ...]:
    """The streams a kernel reads: forward inputs, then incoming gradients."""
    return (*(f"in{i}" for i in range(node.n_inputs)), *(f"out{j}_grad" for j in range(node.n_outputs)))


def check_port(node: Node, port: str, rows: int) -> None:
    """AmpHlsError unless ``port`` is one the node reads and ``rows`` a possible row count."""
    ports = input_ports(node)
    if port not in ports:
        raise AmpHlsError(f"{node.kind} node '{node.name}' has no input port {port!r} (it reads {ports})")
    if rows < 1:
        raise AmpHlsError(f"{node.kind} node '{node.name}': a message has at least one row, not {rows}")
