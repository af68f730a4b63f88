"""A generated list-reduction task: the maximum of a list of digits.

Generated, not collected: lengths uniform in ``[min_len, max_len]``, tokens uniform in
``[0, vocab)``, label = the largest token. Fully determined by the seed.
"""

from __future__ import annotations

import numpy as np

from .base import Example, Splits

DESCRIPTION = "generated: lists of 1-20 random digits, label = max (deterministic from the seed)"


def generate_max_lists(
    n_train: int = 6000,
    n_val: int = 1000,
    n_test: int = 1000,
    min_len: int = 1,
    max_len: int = 20,
    vocab: int = 10,
    seed: int = 0,
) -> Splits:
    def make(n: int, rng: np.random.Generator) -> list[Example]:
        out = []
        for _ in range(n):
            tokens = rng.integers(0, vocab, int(rng.integers(min_len, max_len + 1)))
            out.append(Example(tokens, int(tokens.max())))
        return out

    streams = np.random.default_rng(seed).spawn(3)
    return Splits(
        "generated-max-lists",
        make(n_train, streams[0]),
        make(n_val, streams[1]),
        make(n_test, streams[2]),
        DESCRIPTION,
    )
