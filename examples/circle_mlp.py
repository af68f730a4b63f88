"""The smallest model of your own: an MLP on a CSV file. Is a point inside the unit circle?

Each row of data/points.csv is ``x,y,label``; the columns other than ``label`` (and ``split``)
make the field ``features``. One row per instance, no control flow: empty states.

    amp-hls train examples/circle_mlp.py
"""

from pathlib import Path

import amp_hls as amp

HERE = Path(__file__).parent


def build() -> amp.Graph:
    g = amp.Graph("circle_mlp")
    h = g.tanh(g.linear(g.source("xy", width=2), 16, name="fc"), name="fc_act")
    g.loss(g.linear(h, 2, name="head"), g.source("label", width=1, dtype="index"), "softmax_ce", name="xent")
    return g.validate()


def model() -> amp.ModelSpec:
    return amp.ModelSpec(
        "circle-mlp",
        build,
        {"xy": amp.Feed(lambda example: example.data["features"].reshape(1, 2), state=()),
         "label": amp.Feed(amp.label_row, state=())},
        data=lambda seed: amp.load_dataset(HERE / "data" / "points.csv", seed),
        description="is a point inside the unit circle? (examples/circle_mlp.py, a CSV file)",
        target=0.95,
        defaults={"mak": 8, "muf": 4, "lr": 2e-2, "epochs": 40},
    )
