"""The model specification: tag states declared with the model, and every example checked before
training (a missing or wrong state is an error naming the source and the example)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from amp_hls.datasets import Example, Splits, generate_max_lists
from amp_hls.errors import AmpHlsError
from amp_hls.ir import Graph, S, inc
from amp_hls.models import MODELS, Feed, ModelSpec, label_row, rows
from amp_hls.models.list_rnn import list_rnn_spec
from amp_hls.runtime import TrainConfig, Trainer
from amp_hls.runtime.check import check_examples, sample_instances

SMALL = generate_max_lists(40, 10, 10, max_len=6, seed=1)


def _lists(**feeds: Feed) -> ModelSpec:
    """list-rnn at a small size on short lists, with some feeds replaced."""
    spec = list_rnn_spec(hidden=8, max_len=6)
    return replace(spec, feeds={**spec.feeds, **feeds}, data=lambda seed: SMALL)


def _check(spec: ModelSpec, splits: Splits = SMALL) -> None:
    check_examples(spec, spec.build(), splits)


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"ggsnn-qm9"}))  # qm9: the extra's data
def test_every_zoo_model_feeds_exactly_its_sources_and_its_examples_pass(name):
    spec = MODELS[name]
    graph = spec.build()  # raises unless the feeds cover exactly the graph's sources
    splits = spec.splits(0)
    check_examples(spec, graph, {"train": splits.train[:50], "val": splits.val[:10]})


def test_list_rnn_declares_its_loop_states():
    spec = MODELS["list-rnn"]
    assert spec.feeds["h0"].state == (0, rows("tokens"))
    assert spec.feeds["target"].state == (rows("tokens"), rows("tokens"))
    example = spec.splits(0).train[0]
    inputs = spec.inputs(example)
    n = len(example.data)
    assert inputs["h0"][0] == (0, n) and inputs["target"][0] == (n, n) and inputs["tokens"][0] == ()
    assert inputs["tokens"][1].shape == (n, 10)


def test_an_empty_loop_state_is_an_error_naming_the_source_and_the_example():
    spec = _lists(h0=Feed(lambda e: np.zeros((1, 8)), state=()))
    with pytest.raises(AmpHlsError) as err:
        Trainer(spec, TrainConfig(epochs=1))  # before any training
    text = str(err.value)
    assert "train example 0" in text and "never all meet at node 'step_in'" in text
    assert "'h0' state () rows 1" in text and "in0 from 'tokens', 'h0' has state(s) ()" in text


def test_a_target_at_the_wrong_state_is_an_error_naming_its_source():
    spec = _lists(target=Feed(label_row, state=()))
    with pytest.raises(AmpHlsError, match=r"train example 0: .*node 'xent' \(loss\).*in1 from 'target' has state\(s\) \(\)"):
        _check(spec)


def test_the_first_failing_example_is_named_not_the_first_example():
    bad_length = len(SMALL.train[7].data)
    first = next(i for i, e in enumerate(SMALL.train) if len(e.data) == bad_length)

    def h0_state(example: Example) -> tuple[int, int]:
        n = len(example.data)
        return (0, n + 1) if n == bad_length else (0, n)

    with pytest.raises(AmpHlsError, match=rf"train example {first}: .*'h0' state \(0, {bad_length + 1}\)"):
        _check(_lists(h0=Feed(lambda e: np.zeros((1, 8)), state=h0_state)))


def test_states_out_of_range_and_failing_feeds_name_source_and_example():
    with pytest.raises(AmpHlsError, match=r"source 'h0': the state \(0, 70000\) holds 70000, outside 0\.\.65535"):
        _lists(h0=Feed(lambda e: np.zeros((1, 8)), state=(0, 70000)))
    with pytest.raises(AmpHlsError, match=r"source 'h0': the state .* 5 words"):
        _lists(h0=Feed(lambda e: np.zeros((1, 8)), state=(0, 0, 0, 0, 0)))
    odd = Example(SMALL.val[3].data, SMALL.val[3].label)  # the one example whose state function errs
    with pytest.raises(AmpHlsError, match=r"val example 3: source 'h0': the state \(0, 2\.5\) holds 2\.5, not an int"):
        _check(_lists(h0=Feed(lambda e: np.zeros((1, 8)), state=lambda e: (0, 2.5 if e is odd else len(e.data)))),
               Splits("s", SMALL.train, [*SMALL.val[:3], odd, *SMALL.val[4:]], SMALL.test))

    def broken(example: Example) -> np.ndarray:
        if len(example.data) == len(SMALL.train[5].data):
            raise KeyError("tokens")
        return np.zeros((1, 8))

    first = next(i for i, e in enumerate(SMALL.train) if len(e.data) == len(SMALL.train[5].data))
    with pytest.raises(AmpHlsError, match=rf"train example {first}: source 'h0': KeyError: 'tokens'"):
        _check(_lists(h0=Feed(broken, state=(0, rows("tokens")))))
    with pytest.raises(AmpHlsError, match=r"train example 0: source 'h0': payload of shape \(1, 3\) does not fit"):
        _check(_lists(h0=Feed(lambda e: np.zeros((1, 3)), state=(0, rows("tokens")))))


def test_a_source_without_a_feed_or_a_feed_without_a_source_is_refused():
    spec = list_rnn_spec()
    with pytest.raises(AmpHlsError, match=r"source\(s\) 'h0' of graph 'list_rnn' have no Feed"):
        replace(spec, feeds={k: v for k, v in spec.feeds.items() if k != "h0"}).build()
    with pytest.raises(AmpHlsError, match=r"feed\(s\) for 'extra', which graph 'list_rnn' has no source of"):
        replace(spec, feeds={**spec.feeds, "extra": Feed(label_row, state=())}).build()
    with pytest.raises(AmpHlsError, match=r"counts the rows of 'nope'"):
        replace(spec, feeds={**spec.feeds, "h0": Feed(label_row, state=(0, rows("nope")))})
    with pytest.raises(AmpHlsError, match="metric must be one of"):
        replace(spec, metric="f1")
    with pytest.raises(AmpHlsError, match="unknown training default"):
        replace(spec, defaults={"batch": 3})


def test_an_instance_that_never_reaches_a_loss_is_named():
    g = Graph("detour")  # state (0,) goes to the loss, anything else to the sinks
    kept, dropped = g.cond(g.source("x", width=2), S[0] == 0, name="route")
    g.sink(dropped, name="drop")
    target, no_target = g.cond(g.source("t", width=1, dtype="index"), S[0] == 0, name="route_t")
    g.sink(no_target, name="drop_t")
    g.loss(g.linear(kept, 2, name="fc"), target, "softmax_ce", name="xent")
    g.validate()
    spec = ModelSpec("detour", g, {"x": Feed(lambda e: np.ones((1, 2)), state=lambda e: (e.label,)),
                                   "t": Feed(label_row, state=lambda e: (e.label,))})
    examples = [Example(None, 0), Example(None, 0), Example(None, 1)]
    with pytest.raises(AmpHlsError, match=r"evaluated example 2: the instance never reaches a loss \(xent\): "
                                          r"its messages end in sink\(s\) drop, drop_t.*'x' state \(1,\)"):
        check_examples(spec, g, {"evaluated": examples})


def test_a_loop_state_that_overflows_is_named():
    g = Graph("count")
    h = g.phi(g.source("h", width=2), arity=2, name="h_loop")
    again, done = g.cond(g.isu(g.tanh(h, name="act"), inc(0), name="tick"), S[0] < 3, name="more")
    g.feed(h, again)
    g.loss(done, g.source("t", width=2, max_rows=1), "mse", name="l2")
    g.validate()
    spec = ModelSpec("count", g, {"h": Feed(lambda e: np.zeros((1, 2)), state=()),
                                  "t": Feed(lambda e: np.zeros((1, 2)), state=(3,))})
    with pytest.raises(AmpHlsError, match=r"train example 0: node 'tick': state update .* has no word 0.*'h' state \(\)"):
        check_examples(spec, g, {"train": [Example(None, 0)]})


def test_sample_instances_are_checked_against_the_projects_graph():
    spec = _lists()
    inputs = sample_instances(spec, spec.build(), 3)
    assert [i["h0"][0] for i in inputs] == [(0, len(e.data)) for e in SMALL.train[:3]]
    with pytest.raises(AmpHlsError, match="does not feed graph 'mlp'"):
        sample_instances(spec, MODELS["mlp"].build(), 3)


def test_restricted_inputs_still_count_the_rows_they_refer_to():
    spec = _lists()
    example = SMALL.train[0]
    only = spec.inputs(example, ["h0"])
    assert list(only) == ["h0"] and only["h0"][0] == (0, len(example.data))
