"""Generated graph tasks in the shape of bAbI tasks 15 (basic deduction) and 19 (path finding).

The original bAbI data (Weston et al., 2015) is not available offline, so these are *generated*
stories of the same shape, fully determined by the seed, and their names say so
(``generated-babi15-like``, ``generated-babi19-like``). As in the GGSNN paper (Li et al., 2016),
a story is given to the model as a graph: one node per entity, one edge type per relation (and a
separate type for each relation's reverse), and the question marked in the node features.

- **15-like** (deduction): "Gertrude is a mouse. Mice are afraid of wolves. ... What is Gertrude
  afraid of?" Nodes are the four people and the four species; edge types ``is_a``,
  ``afraid_of`` and their reverses; the queried person carries a marker feature. Answer: the
  species (4 classes).
- **19-like** (path finding): "The kitchen is north of the hallway. ... How do you go from the
  garden to the office?" Locations sit on a grid as a random tree (so every path is unique);
  the facts are the tree's edges. A fact "X is north of Y" gives the edge ``Y -> X`` of type
  *north* (going north from Y reaches X) and ``X -> Y`` of type *south*. Start and end carry
  marker features; they are always two moves apart. Answer: the two directions, as one of 16
  classes ``4 * first + second`` (the 4 pairs that turn straight back never occur).

``GraphData`` (node features, typed edge lists, a regression target) is the instance format of
every graph data set here, QM9 included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .base import Example, Splits

# --- the graph instance format ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # arrays inside: compare fields explicitly
class GraphData:
    """One graph: ``nodes`` (n x features), ``edges[k]`` the ``(src, dst)`` rows of edge type ``k``.

    An edge list may be empty (a molecule without double bonds); the model decides how to carry
    that (the IR has no zero-row messages). ``target`` is the regression target (classification
    tasks use ``Example.label``); ``text`` is a human-readable rendering (story, SMILES).
    """

    nodes: np.ndarray
    edges: tuple[np.ndarray, ...]
    target: float = 0.0
    text: str = ""

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.shape[0])


def _edge_array(pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def _permute(nodes: np.ndarray, edges: list[list[tuple[int, int]]], rng: np.random.Generator
             ) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray]:
    """Shuffle the node order (so position carries no answer) and shuffle each edge list."""
    perm = rng.permutation(nodes.shape[0])  # perm[new] = old
    where = np.empty_like(perm)
    where[perm] = np.arange(perm.size)  # where[old] = new
    out = []
    for pairs in edges:
        e = where[_edge_array(pairs)] if pairs else _edge_array([])
        out.append(e[rng.permutation(len(e))])
    return nodes[perm], tuple(out), where


def _splits(name: str, make: Callable[[np.random.Generator], Example], n_train: int, n_val: int,
            n_test: int, seed: int, description: str) -> Splits:
    streams = np.random.default_rng(seed).spawn(3)
    return Splits(name, [make(streams[0]) for _ in range(n_train)],
                  [make(streams[1]) for _ in range(n_val)],
                  [make(streams[2]) for _ in range(n_test)], description)


# --- bAbI 15-like: basic deduction ------------------------------------------------------------

PEOPLE = ("Gertrude", "Winona", "Jessica", "Emily")
SPECIES = ("mouse", "sheep", "wolf", "cat")
SPECIES_PLURAL = ("mice", "sheep", "wolves", "cats")
BABI15_EDGE_TYPES = ("is_a", "afraid_of", "is_a_rev", "afraid_of_rev")
BABI15_FEATURES = len(PEOPLE) + len(SPECIES) + 1  # entity one-hot + query marker
BABI15_CLASSES = len(SPECIES)
BABI15_DESCRIPTION = ("generated (the original bAbI is not available offline): bAbI-15-like "
                      "deduction stories as typed graphs, 4 people / 4 species, answer = species")


def babi15_example(rng: np.random.Generator) -> Example:
    """One story: every person is a species, every species fears another; ask about one person."""
    n_p, n_s = len(PEOPLE), len(SPECIES)
    fears = [int((s + rng.integers(1, n_s)) % n_s) for s in range(n_s)]  # never itself
    is_a = [int(v) for v in rng.integers(0, n_s, n_p)]
    query = int(rng.integers(n_p))
    answer = fears[is_a[query]]
    # node i < n_p is person i; node n_p + s is species s
    nodes = np.zeros((n_p + n_s, BABI15_FEATURES))
    nodes[np.arange(n_p + n_s), np.arange(n_p + n_s)] = 1.0
    nodes[query, -1] = 1.0
    isa_pairs = [(p, n_p + is_a[p]) for p in range(n_p)]
    fear_pairs = [(n_p + s, n_p + fears[s]) for s in range(n_s)]
    edges = [isa_pairs, fear_pairs, [(d, s) for s, d in isa_pairs], [(d, s) for s, d in fear_pairs]]
    facts = [f"{PEOPLE[p]} is a {SPECIES[is_a[p]]}." for p in range(n_p)]
    facts += [f"{SPECIES_PLURAL[s].capitalize()} are afraid of {SPECIES_PLURAL[fears[s]]}."
              for s in range(n_s)]
    order = rng.permutation(len(facts))
    text = " ".join(facts[i] for i in order) + f" What is {PEOPLE[query]} afraid of? {SPECIES[answer]}"
    perm_nodes, perm_edges, _ = _permute(nodes, edges, rng)
    return Example(GraphData(perm_nodes, perm_edges, text=text), answer)


def generate_babi15(n_train: int = 1000, n_val: int = 500, n_test: int = 500, seed: int = 0) -> Splits:
    return _splits("generated-babi15-like", babi15_example, n_train, n_val, n_test, seed,
                   BABI15_DESCRIPTION)


def solve_babi15(graph: GraphData) -> int:
    """Brute force from the graph alone: the species the queried person's species fears."""
    entity = np.argmax(graph.nodes[:, :-1], axis=1)
    (query,) = np.flatnonzero(graph.nodes[:, -1])
    species = [int(d) for s, d in graph.edges[0] if s == query]
    feared = [int(d) for s, d in graph.edges[1] if s in species]
    if len(species) != 1 or len(feared) != 1:
        raise ValueError(f"story has no unique answer: {graph.text}")
    return int(entity[feared[0]]) - len(PEOPLE)


# --- bAbI 19-like: path finding -----------------------------------------------------------------

LOCATIONS = ("kitchen", "garden", "office", "hallway", "bedroom", "bathroom")
DIRECTIONS = ("north", "east", "south", "west")  # opposite(d) = (d + 2) % 4
STEP = ((0, 1), (1, 0), (0, -1), (-1, 0))  # grid move per direction
BABI19_EDGE_TYPES = DIRECTIONS
BABI19_FEATURES = len(LOCATIONS) + 2  # location one-hot + start marker + end marker
BABI19_CLASSES = len(DIRECTIONS) ** 2
BABI19_DESCRIPTION = ("generated (the original bAbI is not available offline): bAbI-19-like "
                      "path finding on 6 locations laid out as a random grid tree; answer = the "
                      "two directions from start to end (16 classes)")


def babi19_example(rng: np.random.Generator) -> Example:
    """Grow a random tree of locations on a grid, then ask for a two-move path."""
    n = len(LOCATIONS)
    pos = [(0, 0)]
    taken = {(0, 0): 0}
    facts: list[tuple[int, int, int]] = []  # (x, d, y): x is direction d of y
    while len(pos) < n:
        y = int(rng.integers(len(pos)))
        d = int(rng.integers(4))
        cell = (pos[y][0] + STEP[d][0], pos[y][1] + STEP[d][1])
        if cell in taken:
            continue
        taken[cell] = len(pos)
        pos.append(cell)
        facts.append((len(pos) - 1, d, y))
    # typed edges: going d from y reaches x; going opposite(d) from x reaches y
    edges: list[list[tuple[int, int]]] = [[] for _ in DIRECTIONS]
    move: dict[tuple[int, int], int] = {}
    for x, d, y in facts:
        edges[d].append((y, x))
        edges[(d + 2) % 4].append((x, y))
        move[(y, x)], move[(x, y)] = d, (d + 2) % 4
    dist = [_tree_distance(move, n, a) for a in range(n)]
    pairs = [(a, c) for a in range(n) for c in range(n) if dist[a][c] == 2]
    start, end = pairs[int(rng.integers(len(pairs)))]
    (mid,) = [b for b in range(n) if (start, b) in move and (b, end) in move]
    answer = 4 * move[(start, mid)] + move[(mid, end)]
    name_of = rng.permutation(n)  # which name sits where is random too
    names = [LOCATIONS[i] for i in name_of]
    nodes = np.zeros((n, BABI19_FEATURES))
    nodes[np.arange(n), name_of] = 1.0
    nodes[start, -2] = nodes[end, -1] = 1.0
    sentences = [f"The {names[x]} is {DIRECTIONS[d]} of the {names[y]}." for x, d, y in facts]
    text = (" ".join(sentences[i] for i in rng.permutation(len(sentences)))
            + f" How do you go from the {names[start]} to the {names[end]}? "
            + f"{DIRECTIONS[answer // 4]},{DIRECTIONS[answer % 4]}")
    perm_nodes, perm_edges, _ = _permute(nodes, edges, rng)
    return Example(GraphData(perm_nodes, perm_edges, text=text), answer)


def _tree_distance(move: dict[tuple[int, int], int], n: int, start: int) -> list[int]:
    """Breadth-first distances from ``start`` over the stated adjacencies (-1: unreachable)."""
    dist = [-1] * n
    dist[start] = 0
    todo = deque([start])
    while todo:
        a = todo.popleft()
        for b in range(n):
            if (a, b) in move and dist[b] < 0:
                dist[b] = dist[a] + 1
                todo.append(b)
    return dist


def generate_babi19(n_train: int = 1000, n_val: int = 500, n_test: int = 500, seed: int = 0) -> Splits:
    return _splits("generated-babi19-like", babi19_example, n_train, n_val, n_test, seed,
                   BABI19_DESCRIPTION)


def solve_babi19(graph: GraphData) -> int:
    """Brute force from the graph alone: enumerate every start -> b -> end walk over typed edges.

    Raises ``ValueError`` unless exactly one two-move path exists and no one-move path does.
    """
    (start,) = np.flatnonzero(graph.nodes[:, -2])
    (end,) = np.flatnonzero(graph.nodes[:, -1])
    typed = [(int(s), int(d), k) for k, e in enumerate(graph.edges) for s, d in e]
    if any(s == start and d == end for s, d, _ in typed):
        raise ValueError(f"start and end are neighbours: {graph.text}")
    paths = [(k1, k2) for s1, b1, k1 in typed if s1 == start
             for s2, b2, k2 in typed if s2 == b1 and b2 == end]
    if len(paths) != 1:
        raise ValueError(f"{len(paths)} two-move paths: {graph.text}")
    return 4 * paths[0][0] + paths[0][1]
