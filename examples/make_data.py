"""Writes the example data files (committed in examples/data): ``python examples/make_data.py``.

- lists.jsonl: 600 lists of 1..8 tokens 0..3, label 1 when a 3 occurs (no split field: the
  data is shuffled and cut 70/15/15 by the seed);
- graphs.jsonl: 500 graphs of 3..6 nodes coloured red/green/blue (one-hot), 1..6 undirected
  edges written both ways, label 1 when an edge joins red and blue, and a split field
  (350 train, 75 val, 75 test), balanced between the labels;
- points.csv: 400 points of the plane, label 1 inside the unit circle (columns x, y, label).
"""

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
RED, GREEN, BLUE = range(3)


def lists(rng: np.random.Generator, n: int = 600) -> list[dict]:
    out = []
    for _ in range(n):
        tokens = rng.integers(0, 4, int(rng.integers(1, 9))).tolist()
        out.append({"tokens": tokens, "label": int(3 in tokens)})
    return out


def graph(rng: np.random.Generator) -> tuple[list[list[int]], list[list[int]], int]:
    n = int(rng.integers(3, 7))
    colours = rng.integers(0, 3, n)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = rng.choice(len(pairs), int(rng.integers(1, min(6, len(pairs)) + 1)), replace=False)
    edges = [list(pairs[i]) for i in chosen]
    nodes = np.eye(3, dtype=int)[colours].tolist()
    label = int(any({colours[a], colours[b]} == {RED, BLUE} for a, b in edges))
    return nodes, [e for a, b in edges for e in ([a, b], [b, a])], label


def graphs(rng: np.random.Generator, per_label: int = 250) -> list[dict]:
    kept: dict[int, list[dict]] = {0: [], 1: []}
    while min(len(v) for v in kept.values()) < per_label:
        nodes, edges, label = graph(rng)
        if len(kept[label]) < per_label:
            kept[label].append({"nodes": nodes, "edges": edges, "label": label})
    both = kept[0] + kept[1]
    order = rng.permutation(len(both))
    out = [both[i] for i in order]
    for i, record in enumerate(out):
        record["split"] = "train" if i < 350 else "val" if i < 425 else "test"
    return out


def points(rng: np.random.Generator, n: int = 400) -> str:
    xy = rng.uniform(-1.5, 1.5, (n, 2))
    lines = ["x,y,label"] + [f"{x:.4f},{y:.4f},{int(x * x + y * y < 1)}" for x, y in xy]
    return "\n".join(lines) + "\n"


def main() -> None:
    DATA.mkdir(exist_ok=True)
    rng = np.random.default_rng(2024)
    (DATA / "lists.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lists(rng)))
    (DATA / "graphs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in graphs(rng)))
    (DATA / "points.csv").write_text(points(rng))


if __name__ == "__main__":
    main()
