"""Layering, checked from the source: no import circle among amp_hls's top-level parts, and the
command line (``amp_hls.cli``) sits above everything it dispatches to."""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from pathlib import Path

import amp_hls
from amp_hls.ir.validate import strongly_connected

PACKAGE = "amp_hls"
ROOT = Path(amp_hls.__file__).parent

# Circles that are known and allowed (as the set of parts that import each other); none today.
# An entry is a debt: delete it once its circle is broken.
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module under amp_hls: dotted name -> (file, is a package's __init__)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, modules: dict) -> set[str]:
    """The amp_hls modules ``name`` imports anywhere in its source (in functions too), absolute
    and relative; ``from X import y`` counts as importing ``X.y`` where that is a module."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t.split(".")[0] == PACKAGE)
    return found


def _part(module: str) -> str:
    """The top-level part a module belongs to: amp_hls.<subpackage or module>, or amp_hls."""
    return ".".join(module.split(".")[:2])


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, is_package, modules) for name, (path, is_package) in modules.items()}


def _part_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
    """Parts -> the parts they import, and for each such edge one module-level import behind it."""
    edges: dict[str, set[str]] = defaultdict(set)
    witness: dict[tuple[str, str], str] = {}
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = _part(source), _part(target)
            if a != b:
                edges[a].add(b)
                witness.setdefault((a, b), f"{source} imports {target}")
    return edges, witness


def _strongly_connected(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The components of more than one part (each holds a circle)."""
    vertices = sorted(set(edges) | {w for ws in edges.values() for w in ws})
    succ = {v: sorted(ws) for v, ws in edges.items()}
    return [frozenset(c) for c in strongly_connected(vertices, succ) if len(c) > 1]


def _circle(start: str, component: frozenset[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest circle through ``start`` inside its component, as a path that returns to it."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges.get(v, set()) & component):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"no circle through {start} in {sorted(component)}")


def _describe(component: frozenset[str], edges: dict, witness: dict) -> str:
    """The component's parts, then circles (each hop with an import behind it) until every part
    of it is on one."""
    lines, covered = [f"{', '.join(sorted(component))}:"], set()
    for start in sorted(component):
        if start in covered:
            continue
        path = _circle(start, component, edges)
        covered.update(path)
        hops = "; ".join(witness[a, b] for a, b in zip(path, path[1:]))
        lines.append(f"  {' -> '.join(path)}  ({hops})")
    return "\n".join(lines)


def test_the_import_graph_resolves_every_import_form(tmp_path):
    # the graph is only as good as its parser: absolute, relative (module and package level),
    # `from package import module`, and imports inside functions
    source = tmp_path / "mod.py"
    source.write_text(
        "import os\nimport amp_hls.ir.graph\nfrom amp_hls import cli\nfrom . import trainer\n"
        "from .. import errors, models\nfrom ..host.cpu import CpuDevice\n"
        "def f():\n    from ..distributed import run_distributed\n    from .engine import Engine\n"
    )
    modules = dict.fromkeys(["amp_hls", "amp_hls.cli", "amp_hls.errors", "amp_hls.models", "amp_hls.host",
                             "amp_hls.host.cpu", "amp_hls.distributed", "amp_hls.runtime",
                             "amp_hls.runtime.engine", "amp_hls.runtime.trainer", "amp_hls.ir.graph"])
    want = {"amp_hls.ir.graph", "amp_hls.cli", "amp_hls.runtime.trainer", "amp_hls.errors", "amp_hls.models",
            "amp_hls.host.cpu", "amp_hls.distributed", "amp_hls.runtime.engine"}
    assert _imports("amp_hls.runtime.mod", source, False, modules) == want
    assert _imports("amp_hls.runtime", source, True, modules) == want  # an __init__ is its own package
    graph = _import_graph()
    assert "amp_hls.demo" in graph["amp_hls.cli"]  # cmd_demo imports it when it runs
    assert "amp_hls.distributed.server" in graph["amp_hls.distributed"]  # inside run_distributed


def test_no_import_circle_between_top_level_parts():
    edges, witness = _part_graph(_import_graph())
    components = _strongly_connected(edges)
    unexpected = [c for c in components if c not in KNOWN_CYCLES]
    assert not unexpected, "import circles between amp_hls parts:\n" + "\n".join(
        _describe(c, edges, witness) for c in unexpected)


def test_the_fixed_circles_stay_broken():
    edges, _ = _part_graph(_import_graph())
    assert "amp_hls.cli" not in edges["amp_hls.demo"]  # the CLI hands the demo its main
    assert "amp_hls.distributed" not in edges["amp_hls.runtime"]  # the CLI calls run_distributed
    assert "amp_hls.cli" not in edges["amp_hls.distributed"]  # ... with a TrainConfig it built


def test_nothing_below_the_cli_imports_it():
    offenders = sorted(
        f"{source} imports {target}"
        for source, targets in _import_graph().items() if _part(source) != "amp_hls.cli"
        for target in targets if _part(target) == "amp_hls.cli"
    )
    assert not offenders, "the CLI is the top layer, yet:\n" + "\n".join(offenders)
