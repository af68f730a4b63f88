"""Graphs as JSON documents with a schema version; reading one never trusts its content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import IRError
from .builder import Graph
from .graph import GraphCore
from .limits import LIMITS
from .nodes import NODE_KINDS, Node

SCHEMA = "amp-hls.graph"
SCHEMA_VERSION = 1
_PORT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.(in|out)([0-9]{1,3})\Z")


def graph_to_json(graph: GraphCore) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "name": graph.name,
        "nodes": [
            {"name": n.name, "kind": n.kind, "placement": n.placement, "attrs": n.attrs()}
            for n in graph.nodes.values()
        ],
        "edges": [
            {"src": f"{e.src.node}.out{e.src.index}", "dst": f"{e.dst.node}.in{e.dst.index}"}
            for e in graph.edges
        ],
    }


def dumps(graph: GraphCore) -> str:
    return json.dumps(graph_to_json(graph), indent=2)


def save(graph: GraphCore, path: str | Path) -> None:
    Path(path).write_text(dumps(graph) + "\n")


def loads(text: str | bytes) -> Graph:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, a 5000-digit integer
        raise IRError(f"graph document is not valid JSON: {exc}") from None
    return graph_from_json(doc)


def load(path: str | Path) -> Graph:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:  # a directory, a missing or unreadable file
        raise IRError(f"cannot read the graph file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IRError(f"graph file {path} is not UTF-8 text (byte {exc.start}): write it as UTF-8 JSON") from None
    return loads(text)


def graph_from_json(doc: Any) -> Graph:
    """Build and validate a graph from a parsed document; any defect is an ``IRError``."""
    if not isinstance(doc, dict):
        raise IRError(f"graph document must be a JSON object, got {type(doc).__name__}")
    if doc.get("schema") != SCHEMA:
        raise IRError(f"not an amp-hls graph document (schema {doc.get('schema')!r}, want {SCHEMA!r})")
    if doc.get("version") != SCHEMA_VERSION:
        raise IRError(f"graph schema version {doc.get('version')!r} is not supported "
                      f"(this amp-hls reads version {SCHEMA_VERSION})")
    graph = Graph(_field(doc, "name", str, "graph"))
    nodes, edges = _field(doc, "nodes", list, "graph"), _field(doc, "edges", list, "graph")
    # counted before any work that grows with them (adding a node compares it with the others)
    if len(nodes) > LIMITS.max_nodes:
        raise IRError(f"graph {graph.name!r} has {len(nodes)} nodes, beyond {LIMITS.max_nodes}")
    if len(edges) > LIMITS.max_edges:
        raise IRError(f"graph {graph.name!r} has {len(edges)} edges, beyond {LIMITS.max_edges} "
                      f"({LIMITS.max_nodes} nodes of at most {LIMITS.max_arity} inputs)")
    for i, entry in enumerate(nodes):
        graph.add_node(_node_from_json(entry, i))
    for i, entry in enumerate(edges):
        if not isinstance(entry, dict):
            raise IRError(f"edge #{i} must be an object with 'src' and 'dst'")
        src_node, src_index = _port(_field(entry, "src", str, f"edge #{i}"), "out", i)
        dst_node, dst_index = _port(_field(entry, "dst", str, f"edge #{i}"), "in", i)
        graph.connect(src_node, src_index, dst_node, dst_index)
    graph.validate()
    return graph


def _node_from_json(entry: Any, i: int) -> Node:
    if not isinstance(entry, dict):
        raise IRError(f"node #{i} must be a JSON object")
    name = _field(entry, "name", str, f"node #{i}")
    kind = _field(entry, "kind", str, "the entry", node=name)
    if kind not in NODE_KINDS:
        raise IRError(f"unknown node kind {kind!r}; known: {', '.join(sorted(NODE_KINDS))}", node=name)
    attrs = entry.get("attrs", {})
    if not isinstance(attrs, dict):
        raise IRError("attrs must be a JSON object", node=name)
    placement = entry.get("placement")
    try:
        return NODE_KINDS[kind](name=name, placement=placement, **attrs)
    except TypeError as exc:
        raise IRError(f"bad attributes for a {kind} node: {exc}", node=name) from None


def _field(doc: dict, key: str, kind: type, where: str, node: str | None = None) -> Any:
    if key not in doc:
        raise IRError(f"{where} has no {key!r} field", node=node)
    value = doc[key]
    if not isinstance(value, kind):
        raise IRError(f"{where} field {key!r} must be a {kind.__name__}, got {type(value).__name__}",
                      node=node)
    return value


def _port(text: str, side: str, i: int) -> tuple[str, int]:
    match = _PORT.match(text)
    if not match or match.group(2) != side:
        raise IRError(f"edge #{i}: {text!r} is not an {side}put port like 'node.{side}0'")
    return match.group(1), int(match.group(3))
