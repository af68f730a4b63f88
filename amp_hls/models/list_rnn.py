"""List RNN: a recurrent cell unrolled by IR control flow alone.

``tokens`` (one row per element) are ungrouped into messages tagged ``(i, n)``; the hidden state
``h`` carries ``(t, n)`` and meets token ``t`` at a tag join. After the cell, ``isu`` advances
``t`` and ``cond`` loops while ``t < n``; the final state leaves with tag ``(n, n)`` and meets the
target there. Nothing outside the graph knows a loop exists: the two states are declared with
the model's feeds below, where every example is checked against them before training.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..datasets import Example, generate_max_lists
from ..ir import Graph, S, inc
from .spec import Feed, ModelSpec, label_row, rows

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


def list_rnn_spec(vocab: int = 10, hidden: int = 32, classes: int = 10, max_len: int = MAX_LEN) -> ModelSpec:
    """The zoo's list-rnn (other sizes for tests): one list as one-hot token rows (the Ungroup
    tags them ``(i, n)``), a zero hidden state entering the loop at ``(0, n)``, and the target
    waiting at the loop's exit ``(n, n)``, ``n`` the list's length."""

    def one_hot(example: Example) -> np.ndarray:
        tokens = np.asarray(example.data)
        out = np.zeros((len(tokens), vocab))
        out[np.arange(len(tokens)), tokens] = 1.0
        return out

    n = rows("tokens")
    return ModelSpec(
        "list-rnn",
        partial(build_list_rnn, vocab, hidden, classes, max_len),
        {
            "tokens": Feed(one_hot, state=()),
            "h0": Feed(lambda example: np.zeros((1, hidden)), state=(0, n)),
            "target": Feed(label_row, state=(n, n)),
        },
        lambda seed: generate_max_lists(seed=seed, max_len=max_len, vocab=vocab),
        description="recurrent cell unrolled by Phi/Isu/Cond over generated lists; predicts the maximum",
        target=0.97,
        defaults={"mak": 16, "muf": 16, "lr": 3e-3, "epochs": 20},  # muf 16: docs/staleness.md
    )


ENTRIES = [list_rnn_spec()]
