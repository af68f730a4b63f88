"""Every example of a model checked before training: payloads, states, and where the tags go.

A wrong initial state does not fail loudly on its own: a join waits for a partner whose tag never
comes, the instance never reaches its loss, and an epoch "trains" on nothing with every loss
NaN. So before any work, ``check_examples`` turns every example into its source messages
(``ModelSpec.inputs``) and checks each state (``state_problem``) and payload (``payload_problem``,
the source kernel's own check). Then it runs the tags through the graph: control flow reads the
state and the rows only, never the payload values, so one forward pass per distinct
(state, rows) signature, on zero payloads, in the real engine and kernels, shows whether each
instance's messages all meet, leave every loop and reach a loss. The first example that fails
is named, with the sources whose states it depends on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..ir import GraphCore, Loss, Source
from ..kernels import Kernel
from ..kernels.base import JoinBuffer
from ..kernels.host import LossKernel, SinkKernel, payload_problem
from ..models import FeedError, Inputs, ModelSpec, state_problem
from ..numerics import FLOAT32
from .engine import Engine

Signature = tuple[tuple[str, tuple[int, ...], int], ...]  # per source: (name, state, rows)
CHECK_WINDOW = 1024  # signatures in flight at once in the batched pass
DOC = "docs/your-model.md, Initial states"


def check_examples(spec: ModelSpec, graph: GraphCore, examples: Splits | Mapping[str, Sequence[Example]]) -> None:
    """Raise ``AmpHlsError`` naming the split, the example index and the source on the first
    example whose messages the graph cannot take, or whose tags never reach a loss."""
    parts = ({"train": examples.train, "val": examples.val, "test": examples.test}
             if isinstance(examples, Splits) else examples)
    sources = {n.name: graph.spec(n.name, 0) for n in graph.nodes.values() if isinstance(n, Source)}
    first: dict[Signature, tuple[str, Inputs]] = {}  # each signature, with the first example that has it
    for part, items in parts.items():
        for i, example in enumerate(items):
            where = f"model {spec.name!r}, {part} example {i}"
            try:
                inputs = spec.inputs(example)
            except FeedError as exc:
                raise AmpHlsError(f"{where}: source {exc.source!r}: {exc.why}") from None
            signature = []
            for name, spec_ in sources.items():
                state, payload = inputs[name]
                problem = state_problem(state) or payload_problem(spec_, payload)
                if problem:
                    raise AmpHlsError(f"{where}: source {name!r}: {problem}")
                signature.append((name, state, int(payload.shape[0])))
            first.setdefault(tuple(signature), (where, inputs))
    if first:
        _run_tags(spec, graph, sources, first)


def sample_instances(spec: ModelSpec, graph: GraphCore, n: int, seed: int = 0) -> list[Inputs]:
    """The first ``n`` training examples of ``spec`` as messages for ``graph`` (a generated
    project's graph: its sources must be the model's), checked like every example before training."""
    ours = {s.name: graph.spec(s.name, 0) for s in graph.nodes.values() if isinstance(s, Source)}
    built = spec.build()
    theirs = {s.name: built.spec(s.name, 0) for s in built.nodes.values() if isinstance(s, Source)}
    if ours != theirs:
        raise AmpHlsError(f"model {spec.name!r} does not feed graph {graph.name!r}: its sources are "
                          f"{sorted(theirs)}, the graph's {sorted(ours)} (or their shapes differ)")
    examples = list(spec.splits(seed).train[:n])
    if not examples:
        raise AmpHlsError(f"model {spec.name!r} has no training examples")
    check_examples(spec, graph, {"train": examples})
    return [spec.inputs(e) for e in examples]


def _zeros(sources: Mapping, signature: Signature) -> Inputs:
    out: Inputs = {}
    for name, state, n in signature:
        s = sources[name]
        out[name] = (state, np.zeros((n, s.width), dtype=np.int64 if s.dtype == "index" else np.float32))
    return out


def _run_tags(spec: ModelSpec, graph: GraphCore, sources: Mapping, first: dict[Signature, tuple[str, Inputs]]) -> None:
    """One batched forward pass over every signature; if anything is off, one at a time to name it."""
    signatures = list(first)
    engine = Engine(graph, FLOAT32, train=False, max_batch=CHECK_WINDOW)
    try:
        for lo in range(0, len(signatures), CHECK_WINDOW):
            for key in range(lo, min(lo + CHECK_WINDOW, len(signatures))):
                engine.inject(key, _zeros(sources, signatures[key]))
            engine.run()
        clean = not any(k.pending() for k in engine.kernels.values())
        reached = {r.tag.key for k in engine.kernels.values() if isinstance(k, LossKernel) for r in k.results}
        if clean and len(reached) == len(signatures):
            return
    except AmpHlsError:
        pass
    for signature in signatures:  # the failure path: find the first example that fails, alone
        engine = Engine(graph, FLOAT32, train=False)
        where, inputs = first[signature]
        try:
            engine.inject(0, _zeros(sources, signature))
            engine.run()
        except AmpHlsError as exc:
            raise AmpHlsError(f"{where}: {exc}; {_states(graph, inputs, _upstream_sources(graph, _node_of(exc, graph)))} ({DOC})") from None
        held = [n for n, k in engine.kernels.items() if k.pending()]
        if held:
            node = graph.nodes[held[0]]
            waiting = _waiting(graph, engine.kernels[node.name])
            raise AmpHlsError(
                f"{where}: its messages never all meet at node '{node.name}' ({node.kind}), so the "
                f"instance cannot finish{waiting}; {_states(graph, inputs, _upstream_sources(graph, node.name))} ({DOC})")
        if not any(isinstance(k, LossKernel) and k.results for k in engine.kernels.values()):
            sinks = [n for n, k in engine.kernels.items() if isinstance(k, SinkKernel) and k.outputs]
            losses = [n.name for n in graph.nodes.values() if isinstance(n, Loss)]
            raise AmpHlsError(
                f"{where}: the instance never reaches a loss ({', '.join(losses)}): its messages end in "
                f"sink(s) {', '.join(sinks) or '(none)'}; {_states(graph, inputs, list(sources))} ({DOC})")
    raise AmpHlsError(f"model {spec.name!r}: the examples fail together but not one by one "
                      "(messages of different instances met: their keys are not apart)")


def _waiting(graph: GraphCore, kernel: Kernel) -> str:
    """Which tag states arrived at which input of a join that never completed (and from which
    sources), e.g. `` (in0 from 'h0' has state (); in1 from 'tokens' has (0, 7), (1, 7))``."""
    join = getattr(kernel, "join", None)
    if not isinstance(join, JoinBuffer):
        return ""
    arrived: dict[int, list[tuple[int, ...]]] = {}
    for tag, slot in join.slots.items():
        for port, payload in enumerate(slot[: join.arity]):
            if payload is not None:
                arrived.setdefault(port, []).append(tuple(tag.state))
    for port, batch in join.batches.items():
        arrived.setdefault(port, []).extend(tuple(t.state) for t in batch.tags)
    parts = []
    for port in sorted(arrived):
        edge = graph.edge_into(kernel.name, port)
        sources = _upstream_sources(graph, edge.src.node) if edge is not None else []
        states = ", ".join(map(str, sorted(set(arrived[port]))[:4]))
        parts.append(f"in{port} from {', '.join(map(repr, sources)) or '?'} has state(s) {states}")
    return f" ({'; '.join(parts)})" if parts else ""


def _node_of(exc: AmpHlsError, graph: GraphCore) -> str | None:
    """The node a kernel error names (``node 'x': ...``), if it is one of ``graph``'s."""
    text = str(exc)
    if text.startswith("node '"):
        name = text[6:].split("'", 1)[0]
        return name if name in graph.nodes else None
    return None


def _upstream_sources(graph: GraphCore, node: str | None) -> list[str]:
    """The sources whose messages can reach ``node`` (all of them when it is unknown)."""
    every = [n.name for n in graph.nodes.values() if isinstance(n, Source)]
    if node is None:
        return every
    seen, todo = {node}, [node]
    while todo:
        here = todo.pop()
        for e in graph.edges:
            if e.dst.node == here and e.src.node not in seen:
                seen.add(e.src.node)
                todo.append(e.src.node)
    return [s for s in every if s in seen]


def _states(graph: GraphCore, inputs: Inputs, names: Sequence[str]) -> str:
    """What the named sources sent: their initial states and rows, for the user to check."""
    parts = [f"'{n}' state {tuple(inputs[n][0])} rows {np.asarray(inputs[n][1]).shape[0]}" for n in names]
    return ("check the initial states the model declares for its sources: " + ", ".join(parts)
            if parts else "check the model's initial states")

