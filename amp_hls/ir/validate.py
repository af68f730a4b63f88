"""Graph validation: every rule of docs/contracts.md (IR), each failure an ``IRError`` naming node and port.

Checks run in an order where each can rely on the previous ones: names and attributes, then
edge endpoints, then port connectivity, then shapes (a fixpoint over the graph, so loops work),
then the cycle rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from ..errors import IRError
from .graph import GraphCore, PortRef
from .limits import LIMITS
from .names import check_generated_names, check_identifier
from .nodes import PLACEMENTS, Cond, EdgeSpec, Isu, Node, Sink, Source, in_port, out_port

HOST_ONLY = (Source, Sink)  # a Loss may run on the device (it reports on a loss channel)


def validate(graph: GraphCore) -> dict[PortRef, EdgeSpec]:
    """Check ``graph``; return the spec of every output port."""
    check_identifier(graph.name, "graph name")
    _check_nodes(graph)
    _check_edges(graph)
    specs = _infer_specs(graph)
    _check_cycles(graph)
    return specs


def _check_nodes(graph: GraphCore) -> None:
    if not graph.nodes:
        raise IRError(f"graph {graph.name!r} has no nodes")
    if len(graph.nodes) > LIMITS.max_nodes:
        raise IRError(f"graph {graph.name!r} has {len(graph.nodes)} nodes, beyond {LIMITS.max_nodes}")
    seen: dict[str, str] = {}
    generated: dict[str, str] = {}
    for name, node in graph.nodes.items():
        check_identifier(name, "node name", node=name)
        if name != node.name:
            raise IRError(f"stored under the name {name!r}", node=node.name)
        if name.lower() in seen:
            raise IRError(f"name collides with node {seen[name.lower()]!r}", node=name)
        seen[name.lower()] = name
        check_generated_names(name, generated)
        node.check_attrs()
        if node.placement not in PLACEMENTS:
            raise IRError(f"placement must be one of {PLACEMENTS}, got {node.placement!r}", node=name)
        if isinstance(node, HOST_ONLY) and node.placement != "host":
            raise IRError(f"a {node.kind} node runs on the host; placement must be 'host'", node=name)
    if not any(isinstance(n, Source) for n in graph.nodes.values()):
        raise IRError(f"graph {graph.name!r} has no source node")


def _check_edges(graph: GraphCore) -> None:
    into: dict[PortRef, int] = defaultdict(int)
    out_of: dict[PortRef, int] = defaultdict(int)
    for edge in graph.edges:
        for ref, is_input in ((edge.src, False), (edge.dst, True)):
            if ref.node not in graph.nodes:
                raise IRError(f"edge {edge} refers to a node that does not exist", node=ref.node)
            node = graph.nodes[ref.node]
            count = node.n_inputs if is_input else node.n_outputs
            port = in_port(ref.index) if is_input else out_port(ref.index)
            if not isinstance(ref.index, int) or not 0 <= ref.index < count:
                raise IRError(f"no such port on a {node.kind} node (edge {edge})", ref.node, port)
        into[edge.dst] += 1
        out_of[edge.src] += 1
    for node in graph.nodes.values():
        for i in range(node.n_inputs):
            _check_count(node, in_port(i), into[PortRef(node.name, i)], "input")
        for i in range(node.n_outputs):
            _check_count(node, out_port(i), out_of[PortRef(node.name, i)], "output")


def _check_count(node: Node, port: str, count: int, what: str) -> None:
    if count == 0:
        raise IRError(f"{what} is not connected", node.name, port)
    if count > 1:
        hint = " (fan out through a broadcast node)" if what == "output" else ""
        raise IRError(f"{what} is connected {count} times{hint}", node.name, port)


def _infer_specs(graph: GraphCore) -> dict[PortRef, EdgeSpec]:
    """Propagate specs until nothing changes; loops settle because Phi infers from any input."""
    feeding = {e.dst: e.src for e in graph.edges}
    specs: dict[PortRef, EdgeSpec] = {}
    done: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in graph.nodes.values():
            if node.name in done:
                continue
            ins = [specs.get(feeding[PortRef(node.name, i)]) for i in range(node.n_inputs)]
            if node.n_inputs and all(s is None for s in ins):
                continue
            if any(s is None for s in ins) and node.kind != "phi":
                continue
            for i, spec in enumerate(node.infer(ins)):
                specs[PortRef(node.name, i)] = spec
            done.add(node.name)
            changed = True
    for node in graph.nodes.values():
        if node.name not in done:
            raise IRError("no input can ever receive a message (it depends only on itself)", node.name)
        ins = [specs[feeding[PortRef(node.name, i)]] for i in range(node.n_inputs)]
        outs = node.infer(ins)  # every input known now: the full check, e.g. Phi's loop input
        for i, spec in enumerate(outs):
            if spec != specs[PortRef(node.name, i)]:
                raise IRError(f"spec changes around a loop: {specs[PortRef(node.name, i)]} vs {spec}",
                              node.name, out_port(i))
            _check_limits(node, out_port(i), spec)
    return specs


def _check_limits(node: Node, port: str, spec: EdgeSpec) -> None:
    if spec.width > LIMITS.max_width:
        raise IRError(f"width {spec.width} beyond the maximum {LIMITS.max_width}", node.name, port)
    if spec.max_rows > LIMITS.max_rows:
        raise IRError(f"max_rows {spec.max_rows} beyond the maximum {LIMITS.max_rows}", node.name, port)


def _check_cycles(graph: GraphCore) -> None:
    """Every cycle must change the state (an Isu) and be able to leave (a Cond), or it never ends."""
    for component in _strongly_connected(graph):
        nodes = [graph.nodes[n] for n in component]
        if len(nodes) == 1 and not any(
            e.src.node == e.dst.node == nodes[0].name for e in graph.edges
        ):
            continue
        first = min(component)
        if not any(isinstance(n, Isu) for n in nodes):
            raise IRError(f"is on a cycle ({', '.join(sorted(component))}) with no isu node: "
                          "a loop must change the state", first)
        if not any(isinstance(n, Cond) for n in nodes):
            raise IRError(f"is on a cycle ({', '.join(sorted(component))}) with no cond node: "
                          "a loop needs an exit", first)


def _strongly_connected(graph: GraphCore) -> list[set[str]]:
    succ: dict[str, list[str]] = defaultdict(list)
    for e in graph.edges:
        succ[e.src.node].append(e.dst.node)
    return strongly_connected(graph.nodes, succ)


def strongly_connected(vertices: Iterable[str], succ: Mapping[str, Sequence[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative (graphs are small, but recursion limits are not our business):
    every strongly connected component of the vertices and their successors, singletons included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for root in vertices:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, child = work.pop()
            if child == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            if child < len(succ.get(v, ())):
                work.append((v, child + 1))
                w = succ[v][child]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp: set[str] = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                components.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return components
