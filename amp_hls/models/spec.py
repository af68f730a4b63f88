"""A model specification: the graph, and how one example becomes the messages of its sources.

An instance enters the graph as one message per source, each a tag *state* and a *payload*.
The state belongs to the model, not to the data: a loop's Cond reads it, an Isu changes it, a
join matches on it. So every source declares its initial state here, next to its payload
(``Feed``), as either

- a tuple of words, each an int or ``rows("src")`` (the number of payload rows source ``src``
  sends in this instance): list-rnn's hidden state enters at ``(0, rows("tokens"))`` and its
  target waits at ``(rows("tokens"), rows("tokens"))``, where the loop ``t < n`` lets it out;
- or a function of the example returning the words (tree-rnn: each leaf's heap position).

``runtime.check.check_examples`` pushes every example's tags through the graph before training,
so a missing or wrong state is an error naming the source and the example (docs/your-model.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..datasets import Example, Splits
from ..errors import AmpHlsError
from ..ir import Graph, GraphCore, Source
from ..message import MAX_STATE_VALUE, MAX_STATE_WORDS
from .inputs import Inputs

METRICS = ("accuracy", "mae")  # accuracy: higher is better; mae: lower is better
DEFAULT_KEYS = ("mak", "muf", "lr", "epochs")  # training defaults a model may set


@dataclass(frozen=True)
class Rows:
    """A state word: the number of payload rows ``source`` sends in the instance."""

    source: str

    def __str__(self) -> str:
        return f"rows({self.source!r})"


def rows(source: str) -> Rows:
    """The state word that stands for the rows of ``source``'s payload (a list's length)."""
    return Rows(source)


StateRule = tuple[int | Rows, ...] | Callable[[Example], Sequence[int]]


@dataclass(frozen=True)
class Feed:
    """One source's part of an example: its payload rows and its initial tag state."""

    payload: Callable[[Example], ArrayLike]
    state: StateRule


class FeedError(AmpHlsError):
    """A feed's function failed on an example: which model, which source, and why."""

    def __init__(self, model: str, source: str, why: str):
        self.model, self.source, self.why = model, source, why
        super().__init__(f"model {model!r}: source {source!r}: {why}")


def label_row(example: Example) -> np.ndarray:
    """The example's class label as the one-row index payload a ``softmax_ce`` target takes."""
    return np.array([[example.label]], dtype=np.int64)


def state_problem(state: Any) -> str | None:
    """Why ``state`` is no tag state (at most four words, each an int in 0..65535); None if it is."""
    if not isinstance(state, tuple):
        return f"the state must be a tuple of ints, got {type(state).__name__} {state!r}"
    if len(state) > MAX_STATE_WORDS:
        return f"the state {state} has {len(state)} words; a tag holds at most {MAX_STATE_WORDS}"
    for word in state:
        if not isinstance(word, (int, np.integer)) or isinstance(word, bool):
            return f"the state {state} holds {word!r}, not an int"
        if not 0 <= word <= MAX_STATE_VALUE:
            return f"the state {state} holds {word}, outside 0..{MAX_STATE_VALUE}"
    return None


@dataclass(frozen=True)
class ModelSpec:
    """A graph and everything the trainers, the hardware report and the testbench need to feed it.

    ``graph`` is a ``Graph`` or a function building one; ``feeds`` maps every source of the graph
    to its ``Feed``; ``data(seed)`` gives the train/validation/test splits (None: pass a data
    file, ``with_data``). ``target`` is the validation metric to stop at (``metric``: accuracy,
    or mae reported times ``metric_scale`` in ``metric_unit``); ``defaults`` holds training
    settings (``mak``, ``muf``, ``lr``, ``epochs``); ``sized_data(seed, size)`` is the data at a
    chosen size, for data sets that have one (``--dataset-size``).
    """

    name: str
    graph: Graph | Callable[[], Graph]
    feeds: Mapping[str, Feed]
    data: Callable[[int], Splits] | None = None
    description: str = ""
    target: float | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    metric: str = "accuracy"
    # mae only: the model regresses normalised targets; errors are reported times this scale
    # (e.g. the target's standard deviation in eV), in ``metric_unit``.
    metric_scale: float = 1.0
    metric_unit: str = ""
    sized_data: Callable[[int, int | None], Splits] | None = None

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise AmpHlsError(f"a model needs a non-empty name, got {self.name!r}")
        if not (isinstance(self.graph, GraphCore) or callable(self.graph)):
            raise AmpHlsError(f"{where}: graph must be a Graph or a function returning one")
        if not isinstance(self.feeds, Mapping) or not self.feeds:
            raise AmpHlsError(f"{where}: feeds must map each source name to a Feed")
        for name, feed in self.feeds.items():
            if not isinstance(feed, Feed):
                raise AmpHlsError(f"{where}: source {name!r}: expected a Feed(payload, state), got {feed!r}")
            if not callable(feed.payload):
                raise AmpHlsError(f"{where}: source {name!r}: the payload must be a function of the example")
            if isinstance(feed.state, tuple):
                words = tuple(0 if isinstance(w, Rows) else w for w in feed.state)
                problem = state_problem(words)
                if problem:
                    raise AmpHlsError(f"{where}: source {name!r}: {problem}")
                for w in feed.state:
                    if isinstance(w, Rows) and w.source not in self.feeds:
                        raise AmpHlsError(f"{where}: source {name!r}: its state counts the rows of "
                                          f"{w.source!r}, which is not a source of the model")
            elif not callable(feed.state):
                raise AmpHlsError(f"{where}: source {name!r}: the initial state must be a tuple "
                                  f"(of ints and rows('src')) or a function of the example, got {feed.state!r}")
        if self.metric not in METRICS:
            raise AmpHlsError(f"{where}: metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.target is not None and not (isinstance(self.target, (int, float)) and math.isfinite(self.target)):
            raise AmpHlsError(f"{where}: target must be a finite number or None, got {self.target!r}")
        unknown = sorted(set(self.defaults) - set(DEFAULT_KEYS))
        if unknown:
            raise AmpHlsError(f"{where}: unknown training default(s) {', '.join(unknown)}; "
                              f"known: {', '.join(DEFAULT_KEYS)}")
        for name, fn in (("data", self.data), ("sized_data", self.sized_data)):
            if fn is not None and not callable(fn):
                raise AmpHlsError(f"{where}: {name} must be a function of the seed, got {fn!r}")

    # the graph ----------------------------------------------------------------------------------
    def build(self) -> Graph:
        """The model's graph, validated, with a feed for exactly its sources."""
        graph = self.graph if isinstance(self.graph, GraphCore) else self.graph()
        if not isinstance(graph, GraphCore):
            raise AmpHlsError(f"model {self.name!r}: its graph function returned {type(graph).__name__}, not a Graph")
        graph.validate()
        sources = [n.name for n in graph.nodes.values() if isinstance(n, Source)]
        missing = [s for s in sources if s not in self.feeds]
        if missing:
            raise AmpHlsError(f"model {self.name!r}: source(s) {', '.join(map(repr, missing))} of graph "
                              f"{graph.name!r} have no Feed: declare each one's payload and initial state")
        extra = sorted(set(self.feeds) - set(sources))
        if extra:
            raise AmpHlsError(f"model {self.name!r}: feed(s) for {', '.join(map(repr, extra))}, which graph "
                              f"{graph.name!r} has no source of (its sources: {', '.join(sources)})")
        return graph  # type: ignore[return-value]

    # examples -> messages ----------------------------------------------------------------------
    def inputs(self, example: Example, sources: Sequence[str] | None = None) -> Inputs:
        """What ``example`` feeds each source (all, or ``sources``): its state and payload."""
        names = self.feeds if sources is None else sources
        payloads: dict[str, np.ndarray] = {}
        name = ""
        try:
            for name in names:
                payloads[name] = np.asarray(self.feeds[name].payload(example))
            out: Inputs = {}
            for name in names:
                state = self.feeds[name].state
                if callable(state):
                    out[name] = (tuple(state(example)), payloads[name])
                else:
                    out[name] = (tuple(self._rows(w, payloads, example) if type(w) is Rows else w
                                       for w in state), payloads[name])
        except Exception as exc:  # user code: say which source's function failed, and how
            why = str(exc) if isinstance(exc, AmpHlsError) else f"{type(exc).__name__}: {exc}"
            raise FeedError(self.name, name, why) from exc
        return out

    def _rows(self, word: Rows, payloads: dict[str, np.ndarray], example: Example) -> int:
        p = payloads.get(word.source)
        if p is None:  # restricted to some sources, and the counted one is not among them
            p = payloads[word.source] = np.asarray(self.feeds[word.source].payload(example))
        return int(p.shape[0]) if p.ndim else 1

    # scoring ------------------------------------------------------------------------------------
    def better(self, value: float, than: float) -> bool:
        return value >= than if self.metric == "accuracy" else value <= than

    def score(self, records: Sequence[Any]) -> tuple[float, float]:
        """(mean loss, the model's metric) over loss records (``kernels.host.LossRecord``)."""
        if not records:
            return float("nan"), float("nan")
        loss = float(np.mean([r.loss for r in records]))
        if self.metric == "mae":
            errors = [np.abs(r.prediction - r.target).mean() for r in records]
            return loss, float(np.mean(errors)) * self.metric_scale
        judged = [r.correct for r in records if r.correct is not None]
        return loss, float(np.mean(judged)) if judged else float("nan")

    # variants -----------------------------------------------------------------------------------
    def splits(self, seed: int) -> Splits:
        """The model's data; an error saying how to give it some when it has none of its own."""
        if self.data is None:
            raise AmpHlsError(f"model {self.name!r} has no data of its own: pass a data file "
                              "(--data PATH: .npz, .csv or .jsonl; docs/your-model.md, Data files)")
        return self.data(seed)

    def with_data(self, data: Callable[[int], Splits]) -> ModelSpec:
        return replace(self, data=data, sized_data=None)

    def with_dataset_size(self, size: int | None) -> ModelSpec:
        """The model on ``size`` examples of its data set (None: all of it)."""
        if self.sized_data is None:
            raise AmpHlsError(f"model {self.name!r}: its data set has a fixed size (--dataset-size "
                              "applies to data sets drawn from a larger one, such as ggsnn-qm9's)")
        sized = self.sized_data
        return replace(self, data=lambda seed: sized(seed, size))

    def with_graph(self, graph: Graph) -> ModelSpec:
        return replace(self, graph=graph)
