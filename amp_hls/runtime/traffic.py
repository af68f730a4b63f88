"""How many forward messages one instance leaves at a node: the sizing rule's other factor.

A tag table must hold every message of every instance in flight, so ``cache_slots >= mak x
messages_per_instance``. A loop leaves one message per trip and an Ungroup one per row, so the
count depends on the data: it is taken by training sample instances on the fixed-point numpy
runtime, and is never below what the graph itself guarantees (``structural_messages``). The
host (settings checks, the trainers) and the cycle report both size by this one count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..ir import GraphCore
from ..ir.validate import strongly_connected
from ..kernels import Kernel
from ..message import Message
from ..models.inputs import Inputs
from ..numerics import NumericConfig
from .engine import Engine

SAMPLE = 512  # instances counted at most (the graph's own bound is taken too)


class _Count:
    """A kernel's stand-in in the engine counting the forward messages it is handed, per key."""

    def __init__(self, kernel: Kernel, counts: Counter[tuple[str, int]]):
        self._kernel = kernel
        self._counts = counts

    def __getattr__(self, name: str) -> object:
        return getattr(self._kernel, name)

    def forward(self, port: int, msgs: Sequence[Message], train: bool = True) -> object:
        for m in msgs:
            self._counts[(f"in{port}", m.tag.key)] += 1
        return self._kernel.forward(port, msgs, train)


def structural_messages(graph: GraphCore) -> int:
    """A lower bound the graph itself gives: an Ungroup leaves one message per row of its input."""
    most = 1
    for name, node in graph.nodes.items():
        if node.kind == "ungroup":
            most = max(most, graph.input_spec(name, 0).max_rows)
    return most


def is_dynamic(graph: GraphCore) -> bool:
    """Whether an instance can leave more than one message at a port: a loop or an Ungroup."""
    succ: dict[str, list[str]] = {}
    for e in graph.edges:
        succ.setdefault(e.src.node, []).append(e.dst.node)
    loops = any(len(c) > 1 for c in strongly_connected(graph.nodes, succ))
    return loops or any(node.kind == "ungroup" for node in graph.nodes.values())


def messages_per_instance(graph: GraphCore, nodes: Iterable[str], inputs: Sequence[Inputs]) -> int:
    """The most forward messages one instance of ``inputs`` (the first ``SAMPLE``) leaves at one
    input port of one of ``nodes``, trained forward and backward on the numpy runtime; at least
    the graph's own bound (``structural_messages``)."""
    engine = Engine(graph, NumericConfig("fixed"), seed=0)
    counts: dict[str, Counter[tuple[str, int]]] = {}
    for name in nodes:
        counts[name] = Counter()
        engine.kernels[name] = _Count(engine.kernels[name], counts[name])  # type: ignore[assignment]
    for key, instance in enumerate(inputs[:SAMPLE]):
        engine.inject(key, instance)
        if key % 256 == 255:
            engine.run()
    engine.run()
    most = max((n for c in counts.values() for n in c.values()), default=1)
    return max(most, structural_messages(graph))
