"""A Linear's word shape (``Linear.input_lanes``, ``input_words``, ``last_word_lanes``): the one
place the RTL template and the cycle model read how an input row falls into MAC words."""

from __future__ import annotations

import pytest

from amp_hls.ir import Linear


@pytest.mark.parametrize(("n_in", "n_out", "p", "lanes", "words", "last"), [
    (10, 3, 1, 1, 10, 1),  # a lane a word
    (10, 3, 4, 4, 3, 2),  # the last word holds the row's last 2 inputs
    (48, 2, 16, 16, 3, 16),  # words fill the row exactly
    (48, 16, 48, 48, 1, 48),  # one word a row
    (10, 4, 24, 12, 1, 10),  # 2 rows of W a step: a word is the row padded to whole beats (12 lanes)
])
def test_an_input_row_falls_into_words(n_in, n_out, p, lanes, words, last):
    node = Linear(name="fc", in_features=n_in, out_features=n_out, parallelism=p)
    assert (node.input_lanes, node.input_words, node.last_word_lanes) == (lanes, words, last)
    assert (words - 1) * lanes + last == n_in and 0 < last <= lanes
