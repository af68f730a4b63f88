"""List RNN: a recurrent cell unrolled by IR control flow alone.

``tokens`` (one row per element) are ungrouped into messages tagged ``(i, n)``; the hidden state
``h`` carries ``(t, n)`` and meets token ``t`` at a tag join. After the cell, ``isu`` advances
``t`` and ``cond`` loops while ``t < n``; the final state leaves with tag ``(n, n)`` and meets the
target there. Nothing outside the graph knows a loop exists.
"""

from __future__ import annotations

import numpy as np

from ..datasets import Example, generate_max_lists
from ..ir import Graph, S, inc
from .inputs import Inputs
from .zoo import ModelEntry

MAX_LEN = 20


def build_list_rnn(vocab: int = 10, hidden: int = 32, classes: int = 10, max_len: int = MAX_LEN) -> Graph:
    g = Graph("list_rnn")
    x_t = g.ungroup(g.source("tokens", width=vocab, max_rows=max_len), name="elements")
    h = g.phi(g.source("h0", width=hidden), arity=2, name="h")
    h_next = g.tanh(g.linear(g.concat(h, x_t, name="step_in"), hidden, name="rnn"), name="rnn_act")
    again, done = g.cond(g.isu(h_next, inc(0), name="advance"), S[0] < S[1], name="more")
    g.feed(h, again)
    logits = g.linear(done, classes, name="head")
    g.loss(logits, g.source("target", width=1, dtype="index"), "softmax_ce", name="xent")
    return g.validate()  # type: ignore[return-value]


def list_rnn_inputs(graph: Graph, example: Example) -> Inputs:
    """One list as messages: one-hot token rows, a zero initial state, the target at the exit tag."""
    tokens = np.asarray(example.data)
    n = len(tokens)
    one_hot = np.zeros((n, graph.node("tokens").width))
    one_hot[np.arange(n), tokens] = 1.0
    return {
        "tokens": ((), one_hot),
        "h0": ((0, n), np.zeros((1, graph.node("h0").width))),
        "target": ((n, n), np.array([[example.label]])),
    }


ENTRIES = [
    ModelEntry(
        "list-rnn",
        "recurrent cell unrolled by Phi/Isu/Cond over generated lists; predicts the maximum",
        build_list_rnn,
        lambda seed: generate_max_lists(seed=seed),
        list_rnn_inputs,
        target=0.97,
        defaults={"mak": 16, "muf": 16, "lr": 3e-3, "epochs": 20},  # muf 16: docs/staleness.md
    )
]
