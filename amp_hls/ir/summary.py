"""A readable text table of a graph: what a user checks before generating hardware."""

from __future__ import annotations

from .graph import GraphCore, PortRef


def summary(graph: GraphCore) -> str:
    graph.validate()
    feeding = {e.dst: e.src for e in graph.edges}
    rows = [("node", "kind", "place", "inputs", "outputs", "params", "attributes")]
    n_params = 0
    for node in graph.nodes.values():
        ins = []
        for i in range(node.n_inputs):
            src = feeding[PortRef(node.name, i)]
            ins.append(f"{src.node}.out{src.index}")
        outs = [str(graph.spec(node.name, i)) for i in range(node.n_outputs)]
        count = sum(_prod(shape) for shape in node.param_shapes().values())
        n_params += count
        rows.append((
            node.name,
            node.kind,
            node.placement or "",
            ", ".join(ins) or "-",
            ", ".join(outs) or "-",
            str(count) if count else "",
            node.describe(),
        ))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [f"graph {graph.name}: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
             f"{n_params} parameters"]
    for j, r in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out
