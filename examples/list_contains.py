"""A list model of your own: does a list of tokens contain a 3? (docs/your-model.md, part 1)

Each example is one JSON line of data/lists.jsonl: ``{"tokens": [0, 3, 1], "label": 1}``. A
recurrent cell walks the list with the IR's control flow: the Ungroup tags token ``t`` of ``n``
with the state ``(t, n)``; the hidden state enters the loop at ``(0, n)``, meets token ``t`` at a
tag join, and the Isu/Cond pair loops while ``t < n``; the last state leaves at ``(n, n)``,
where the label waits. Those two initial states are declared with the feeds below.

    amp-hls train examples/list_contains.py --epochs 5
"""

from pathlib import Path

import numpy as np

import amp_hls as amp

HERE = Path(__file__).parent
VOCAB = 4  # tokens 0..3
HIDDEN = 8
MAX_LEN = 8


def build() -> amp.Graph:
    g = amp.Graph("list_contains")
    token = g.ungroup(g.source("tokens", width=VOCAB, max_rows=MAX_LEN), name="token")  # (t, n) each
    h = g.phi(g.source("h0", width=HIDDEN), arity=2, name="h")  # the loop's entry
    h_next = g.tanh(g.linear(g.concat(h, token, name="step_in"), HIDDEN, name="recur"), name="recur_act")
    again, done = g.cond(g.isu(h_next, amp.inc(0), name="advance"), amp.S[0] < amp.S[1], name="more")
    g.feed(h, again)  # close the loop
    g.loss(g.linear(done, 2, name="head"), g.source("label", width=1, dtype="index"), "softmax_ce", name="xent")
    return g.validate()


def one_hot(example: amp.Example) -> np.ndarray:
    tokens = np.asarray(example.data["tokens"], dtype=np.int64)
    rows = np.zeros((len(tokens), VOCAB))
    rows[np.arange(len(tokens)), tokens] = 1.0
    return rows


def model() -> amp.ModelSpec:
    n = amp.rows("tokens")  # the list's length, in each example
    return amp.ModelSpec(
        "list-contains",
        build,
        {
            "tokens": amp.Feed(one_hot, state=()),  # the Ungroup adds (t, n)
            "h0": amp.Feed(lambda example: np.zeros((1, HIDDEN)), state=(0, n)),
            "label": amp.Feed(amp.label_row, state=(n, n)),  # where the loop lets the state out
        },
        data=lambda seed: amp.load_dataset(HERE / "data" / "lists.jsonl", seed),
        description="does a list of tokens 0..3 contain a 3? (examples/list_contains.py)",
        target=0.95,
        defaults={"mak": 8, "muf": 4, "lr": 1e-2, "epochs": 10},
    )
