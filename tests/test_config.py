"""The run configuration file (TOML): one schema, errors naming the key, read by `generate` and
`train` alike; per-node precision is refused, parallelism applied to the graph."""

from __future__ import annotations

import json

import pytest

from amp_hls import api
from amp_hls.cli import build_parser, main
from amp_hls.cli.train import config_from_args
from amp_hls.config import NODE_KEYS, REFUSED_NODE_KEYS, SCHEMA, config_from_dict, load_config
from amp_hls.errors import AmpHlsError
from amp_hls.models import MODELS
from amp_hls.numerics import Precision

CONFIG = """
[training]
mak = 4
muf = 2
lr = 0.01
epochs = 3
numerics = "fixed"

[precision]
data = "Q16.11"

[device]
board = "zcu104"
cache_slots = 32

[nodes.fc0]
parallelism = 4
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG)
    return path


def test_a_file_is_read_and_validated(config_file):
    c = load_config(config_file)
    assert c.training == {"mak": 4, "muf": 2, "lr": 0.01, "epochs": 3, "numerics": "fixed"}
    assert c.precision == {"data": Precision(16, 11)}
    assert c.device == {"board": "zcu104", "cache_slots": 32} and c.nodes == {"fc0": {"parallelism": 4}}
    graph = c.apply(MODELS["mlp"].build())
    assert graph.nodes["fc0"].parallelism == 4 and graph.nodes["head"].parallelism == 1


@pytest.mark.parametrize(("doc", "match"), [
    ({"trainin": {}}, r"x\.toml: unknown section \[trainin\]; known: training, precision, device, nodes"),
    ({"training": {"lrr": 1}}, r"unknown key \[training\] lrr; known: mak, muf"),
    ({"training": {"mak": 0}}, r"\[training\] mak: must be at least 1, got 0"),
    ({"training": {"mak": 2.5}}, r"\[training\] mak: must be an integer, got 2\.5"),
    ({"training": {"mak": True}}, r"\[training\] mak: must be an integer, got True"),
    ({"training": {"lr": "fast"}}, r"\[training\] lr: must be a number, got 'fast'"),
    ({"training": {"optimizer": "lamb"}}, r"\[training\] optimizer: must be one of sgd, momentum, adam"),
    ({"precision": {"data": "16.10"}}, r"\[precision\] data: must be a fixed-point format like \"Q16\.10\""),
    ({"precision": {"grads": "Q40.3"}}, r"\[precision\] grads: Precision width must be in \[2, 32\]"),
    ({"device": {"board": "zedboard"}}, r"\[device\] board: unknown board 'zedboard'; known boards: kv260"),
    ({"nodes": {"fc0": {"precision": "Q8.4"}}}, r"\[nodes\.fc0\] precision: per-node precision is not supported"),
    ({"nodes": {"fc0": {"reuse": 2}}}, r"unknown key \[nodes\.fc0\] reuse; known: parallelism, lanes"),
    ({"nodes": {"fc0": 4}}, r"\[nodes\.fc0\] must be a table"),
])
def test_every_error_names_the_file_and_the_key(doc, match):
    with pytest.raises(AmpHlsError, match=match):
        config_from_dict(doc, "x.toml")


def test_per_node_settings_are_checked_against_the_graph():
    graph = MODELS["mlp"].build()
    with pytest.raises(AmpHlsError, match=r"\[nodes\.act0\] parallelism: node 'act0' is of kind activation"):
        config_from_dict({"nodes": {"act0": {"parallelism": 2}}}).apply(graph)
    with pytest.raises(AmpHlsError, match=r"\[nodes\.fc9\]: graph 'mlp' has no node 'fc9' \(its nodes: x, fc0"):
        config_from_dict({"nodes": {"fc9": {"parallelism": 2}}}).apply(graph)
    with pytest.raises(AmpHlsError, match=r"\[nodes\.fc0\] lanes: node 'fc0' is of kind linear; only row-wise nodes"):
        config_from_dict({"nodes": {"fc0": {"lanes": 2}}}).apply(graph)
    assert config_from_dict({"nodes": {"act0": {"lanes": 4}}}).apply(graph).nodes["act0"].lanes == 4  # type: ignore[attr-defined]


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[training\nmak = 1")
    with pytest.raises(AmpHlsError, match=r"bad\.toml: not valid TOML"):
        load_config(bad)
    with pytest.raises(AmpHlsError, match=r"missing\.toml"):
        load_config(tmp_path / "missing.toml")


def test_the_schema_is_documented():
    """docs/your-model.md lists every key of the schema, and the refused ones."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "your-model.md").read_text()
    for section, keys in SCHEMA.items():
        for key in keys:
            assert f"`{key}`" in text, (section, key)
    for key in [*NODE_KEYS, *REFUSED_NODE_KEYS]:
        assert f"`{key}`" in text


def test_train_takes_the_file_and_options_win(config_file):
    args = build_parser().parse_args(["train", "mlp", "--config", str(config_file), "--lr", "0.5"])
    c = config_from_args(args, config=load_config(config_file))
    assert (c.mak, c.muf, c.epochs, c.numerics, c.optimizer.lr) == (4, 2, 3, "fixed", 0.5)
    assert c.precision == {"data": Precision(16, 11)} and c.numeric_config().data == Precision(16, 11)
    assert c.target == MODELS["mlp"].target  # neither given nor in the file: the model's


def test_a_precision_with_float_numerics_is_an_error(config_file, capsys):
    assert main(["train", "mlp", "--config", str(config_file), "--numerics", "float", "--quiet"]) == 2
    assert "data precision is set, but numerics is 'float'" in capsys.readouterr().err


def test_generate_takes_the_file(config_file, tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["generate", "mlp", "-o", str(out), "--config", str(config_file), "--muf", "3"]) == 0
    assert "zcu104" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["muf"] == 3 and manifest["cache_slots"] == 32  # --muf wins over [training] muf
    assert manifest["numerics"]["data"] == {"width": 16, "frac": 11} and manifest["board"]["name"] == "zcu104"
    graph = json.loads((out / "graph.json").read_text())
    assert next(n for n in graph["nodes"] if n["name"] == "fc0")["attrs"]["parallelism"] == 4
    # the same options through the Python API
    options = api.device_options(load_config(config_file))
    assert (options.muf, options.cache_slots, options.numerics.data) == (2, 32, Precision(16, 11))
